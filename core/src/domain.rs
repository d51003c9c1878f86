//! Storage domains: where the bytes of a value live.
//!
//! Owns: [`Domain`]. Invariant: a domain is part of every allocation's descriptor and of
//! every alias made from it, so dispatch can choose a backend from the operands alone.

use std::fmt;

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Domain {
    /// Host memory, worked on by the CPU backend.
    #[default]
    Cpu,
    /// Memory of one CUDA device, worked on through that device's stream.
    Cuda {
        /// The device ordinal, as the CUDA driver numbers devices.
        ordinal: u32,
    },
}

impl Domain {
    /// Whether the host can read the bytes directly.
    pub fn is_host(self) -> bool {
        matches!(self, Domain::Cpu)
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Domain::Cpu => f.write_str("cpu"),
            Domain::Cuda { ordinal } => write!(f, "cuda:{ordinal}"),
        }
    }
}
