#![allow(missing_docs)]
use std::path::PathBuf;
use std::time::Instant;
use tessera::blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera::contract::{Contraction, Network, Spec};
use tessera::prelude::Runtime;
/// One step of the chain: operands `A` and `B` (by name, `T` the running result) and the
/// labels contracted on each.
type Step = (String, String, Vec<String>, Vec<String>);

/// One operand of the data files: its leg labels and the array.
struct Tensor {
    labels: Vec<String>,
    array: AsyncArray<f64, U1>,
}

fn load_heff(chi: usize) -> (Vec<(String, Tensor)>, Vec<Step>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(format!("heff_heisenberg_chi{chi}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut tensors = Vec::new();
    for (seed, (name, op)) in json["operands"].as_object().unwrap().iter().enumerate() {
        let mut labels = Vec::new();
        let legs: Vec<Leg<U1>> = op["legs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                labels.push(l["label"].as_str().unwrap().to_owned());
                let dir = Direction::from_sign(l["dir"].as_i64().unwrap()).unwrap();
                let sectors = l["sectors"].as_array().unwrap().iter().map(|s| {
                    (
                        U1(s[0].as_i64().unwrap() as i32),
                        s[1].as_u64().unwrap() as usize,
                    )
                });
                Leg::new(dir, sectors).unwrap()
            })
            .collect();
        let flux = U1(op["flux"][0].as_i64().unwrap() as i32);
        // Stored in the layout a DMRG code keeps them in: split as their first contraction
        // in the chain takes them (L and R with their virtual and MPO legs as rows, W with
        // its MPO legs as rows, theta with its left virtual leg as rows).
        let split = match name.as_str() {
            "LP" | "RP" => 2,
            "theta" => 1,
            _ => legs.len() / 2,
        };
        let s = BlockStructure::from_legs(legs, split, flux).unwrap();
        let array = AsyncArray::random(s, seed as u64 + 1);
        tensors.push((name.clone(), Tensor { labels, array }));
    }
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    let chain = json["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step[0].as_str().unwrap().to_owned(),
                step[1].as_str().unwrap().to_owned(),
                strings(&step[2]),
                strings(&step[3]),
            )
        })
        .collect();
    (tensors, chain)
}

/// The chain of contractions; returns the result and the total flops.
fn apply_heff(tensors: &[(String, Tensor)], chain: &[Step]) -> (AsyncArray<f64, U1>, u64) {
    let mut running: Option<Tensor> = None;
    let mut flops = 0;
    for (x, y, ax, ay) in chain {
        let previous = running.take();
        let operand = |name: &str| -> &Tensor {
            if name == "T" {
                previous.as_ref().expect("T is the running result")
            } else {
                &tensors
                    .iter()
                    .find(|(n, _)| n == name)
                    .expect("an operand")
                    .1
            }
        };
        let (a, b) = (operand(x), operand(y));
        let pos = |t: &Tensor, l: &String| t.labels.iter().position(|x| x == l).unwrap();
        let axes_a: Vec<usize> = ax.iter().map(|l| pos(a, l)).collect();
        let axes_b: Vec<usize> = ay.iter().map(|l| pos(b, l)).collect();
        let spec = Spec::tensordot(a.labels.len(), b.labels.len(), &axes_a, &axes_b).unwrap();
        let c = Contraction::from_spec(spec);
        flops += c.plan(&a.array, &b.array).unwrap().flops();
        let array = c.apply(1.0, &a.array, &b.array).unwrap();
        let labels = a
            .labels
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes_a.contains(i))
            .chain(
                b.labels
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| !axes_b.contains(j)),
            )
            .map(|(_, l)| l.clone())
            .collect();
        running = Some(Tensor { labels, array });
    }
    (running.unwrap().array, flops)
}

fn main() {
    let chi: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(512);
    let runtime = Runtime::new(2).unwrap();
    let (tensors, chain) = load_heff(chi);
    {
        // labels -> chars
        let mut map: Vec<String> = Vec::new();
        let mut ch = |l: &str| -> char {
            let base = l.trim_end_matches('*');
            let i = map.iter().position(|x| x == base).unwrap_or_else(|| {
                map.push(base.to_string());
                map.len() - 1
            });
            char::from_u32('a' as u32 + i as u32).unwrap()
        };
        // contracted pairs per the chain are (vR of LP ~ vL of theta) etc: build labels from chain
        let names: Vec<&String> = tensors.iter().map(|(n, _)| n).collect();
        println!("tensors {:?}", names);
        for (n, t) in &tensors {
            println!(
                "{n}: {:?} blocks {} len {}",
                t.labels,
                t.array.num_blocks(),
                t.array.structure().total_len()
            );
        }
        let _ = &mut ch;
        let st = |n: &str| {
            tensors
                .iter()
                .find(|(m, _)| m == n)
                .unwrap()
                .1
                .array
                .structure()
                .clone()
        };
        let net = Network::new(vec![
            ("xab", st("LP")),
            ("bcde", st("theta")),
            ("afgc", st("W0")),
            ("fhid", st("W1")),
            ("ehy", st("RP")),
        ])
        .unwrap();
        let opt = net.optimal().unwrap();
        println!("optimal {opt}");
        println!("greedy {}", net.greedy().unwrap());
        // the file's chain: (LP theta)=5, (W0 5)=6, (6 W1)=7, (7 RP)=8
        println!(
            "chain cost {}",
            net.cost(&[(0, 1), (2, 5), (6, 3), (7, 4)]).unwrap()
        );
        println!(
            "w01-first cost {}",
            net.cost(&[(2, 3), (0, 1), (6, 5), (7, 4)]).unwrap()
        );
    }
    // per-step timing
    for rep in 0..4 {
        let mut running: Option<Tensor> = None;
        let t0 = Instant::now();
        for (x, y, ax, ay) in &chain {
            let previous = running.take();
            let operand = |name: &str| -> &Tensor {
                if name == "T" {
                    previous.as_ref().unwrap()
                } else {
                    &tensors.iter().find(|(n, _)| n == name).unwrap().1
                }
            };
            let (a, b) = (operand(x), operand(y));
            let pos = |t: &Tensor, l: &String| t.labels.iter().position(|x| x == l).unwrap();
            let axes_a: Vec<usize> = ax.iter().map(|l| pos(a, l)).collect();
            let axes_b: Vec<usize> = ay.iter().map(|l| pos(b, l)).collect();
            let spec = Spec::tensordot(a.labels.len(), b.labels.len(), &axes_a, &axes_b).unwrap();
            let c = Contraction::from_spec(spec);
            let plan = c.plan(&a.array, &b.array).unwrap();
            let t = Instant::now();
            let array = runtime.enter(|| c.apply(1.0, &a.array, &b.array).unwrap());
            let sub = t.elapsed();
            array.wait().unwrap();
            let e = t.elapsed();
            if rep == 3 {
                println!("{plan}");
                println!(
                    "  submit {:?} total {:?}  {:.1} GFLOP/s",
                    sub,
                    e,
                    plan.flops() as f64 / e.as_secs_f64() * 1e-9
                );
            }
            let labels = a
                .labels
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes_a.contains(i))
                .chain(
                    b.labels
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| !axes_b.contains(j)),
                )
                .map(|(_, l)| l.clone())
                .collect();
            running = Some(Tensor { labels, array });
        }
        if rep == 3 {
            println!("chain {:?}", t0.elapsed());
        }
    }
    let _ = apply_heff;
}
