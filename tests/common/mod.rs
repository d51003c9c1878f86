//! Helpers shared by the integration tests that run the example drivers.
//!
//! Owns: [`run_example`]. Invariant: an example runs in the profile of the test that runs it
//! (release for `cargo test --release`), so its build is the one cargo already has.

/// `cargo run --example NAME -- argv`: the exit status, stdout and stderr.
pub(crate) fn run_example(name: &str, argv: &[&str]) -> (Option<i32>, String, String) {
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--example", name]);
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    let out = cargo.arg("--").args(argv).output().expect("cargo runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
