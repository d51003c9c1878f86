//! The example drivers' command lines (`examples/args/`): every bad, missing, repeated,
//! unknown or out-of-range flag, every run too big for the memory and every unwritable output
//! is refused before anything runs, with a usage message that names the flag and exit status
//! 2; `--threads 0` means all cores. The parse layer is tested directly (the drivers' own
//! module, compiled here), and one refusal end to end through `cargo run`.

mod common;
// The drivers' module, compiled here as it is there.
#[allow(dead_code)]
#[path = "../examples/args/mod.rs"]
mod args;

use args::block_gemm::{self, Memory, ScalarType, SizeDist};
use args::{Threads, dmrg, task_graph, with_usage};
use clap::{CommandFactory, Parser};
use std::path::{Path, PathBuf};

/// A fresh, empty directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-drivers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Parses `argv` (without the program name) and prepares the run; the error as printed.
fn refusal<A: Parser, P: std::fmt::Debug>(
    program: &str,
    argv: &[&str],
    prepare: impl FnOnce(A) -> Result<P, clap::Error>,
) -> (i32, String) {
    let line = std::iter::once(program).chain(argv.iter().copied());
    match A::try_parse_from(line).and_then(prepare) {
        Ok(p) => panic!("{program} {argv:?} was accepted: {p:?}"),
        Err(e) => {
            let code = e.exit_code();
            let text = with_usage::<A>(e).expect("an error, not help");
            (code, text)
        }
    }
}

/// Checks one refusal: status 2, the flag named, the usage shown, no panic.
fn check(program: &str, argv: &[&str], flag: &str, (code, text): (i32, String)) {
    assert_eq!(code, 2, "{program} {argv:?}: exit status, message:\n{text}");
    assert!(
        text.contains(flag),
        "{program} {argv:?}: {flag} not named in:\n{text}"
    );
    assert!(
        text.contains(&format!("Usage: {program}")),
        "{program} {argv:?}: no usage in:\n{text}"
    );
    assert!(!text.contains("panicked"), "{program} {argv:?}:\n{text}");
}

#[test]
fn dmrg_refuses_bad_flags_naming_them() {
    let dir = scratch("dmrg-flags");
    let trace = dir.join("t.json");
    let trace = trace.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--sweeps", "0"], "--sweeps"),
        (&["--sweeps", "-3"], "--sweeps"),
        (&["--sites", "1"], "--sites"),
        (&["--sites", "abc"], "--sites"),
        (&["--sites", "5000"], "--sites"),
        (&["--chi", "0"], "--chi"),
        (&["--tol", "-1e-9"], "--tol"),
        (&["--tol", "NaN"], "--tol"),
        (&["--tol", "inf"], "--tol"),
        (&["--lanczos-iter", "0"], "--lanczos-iter"),
        (&["--lanczos-iter-early", "0"], "--lanczos-iter-early"),
        (&["--lanczos-iter-early", "1001"], "--lanczos-iter-early"),
        (&["--threads", "1025"], "--threads"),
        (&["--threads", "two"], "--threads"),
        (&["--sites"], "--sites"),
        (&["--trace"], "--trace"),
        (&["--sites", "4", "--sites", "8"], "--sites"),
        (&["--trace", trace, "--trace", trace], "--trace"),
        (&["--sitse", "8"], "--sitse"),
        (&["extra"], "extra"),
        (&["--model", "ising"], "--model"),
        (&["--model", "hubbard:V=1"], "--model"),
        (&["--model", "hubbard:U=abc"], "--model"),
        (&["--model", "tv:L=8"], "--model"),
        (&["--model", "heisenberg:S=3/2"], "--model"),
        (&["--model", "tv:N=40", "--sites", "8"], "--model"),
        (&["--json"], "--json"),
        // Without the mpi feature --distributed names itself; with it, what it excludes.
        (
            &["--distributed", "--trace", trace],
            if cfg!(feature = "mpi") {
                "--trace"
            } else {
                "--distributed"
            },
        ),
    ];
    for &(argv, flag) in cases {
        check(
            "dmrg",
            argv,
            flag,
            refusal("dmrg", argv, dmrg::Args::prepare),
        );
    }
    // Nothing was written for the refused runs.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dmrg_refuses_checkpoint_and_spill_directories_it_cannot_use() {
    let dir = scratch("dmrg-dirs");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let under_file = file.join("sub");
    let missing = dir.join("missing");
    let (empty, file, under_file, missing) = (
        empty.to_str().unwrap(),
        file.to_str().unwrap(),
        under_file.to_str().unwrap(),
        missing.to_str().unwrap(),
    );
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--resume", missing], "--resume", "no checkpoint"),
        (&["--resume", empty], "--resume", "no checkpoint"),
        (&["--resume", file], "--resume", "no checkpoint"),
        (&["--save", file], "--save", "cannot create"),
        (&["--save", under_file], "--save", "cannot create"),
        (&["--spill", file], "--spill", "cannot create"),
        (&["--spill", under_file], "--spill", "cannot create"),
        (&["--save"], "--save", ""),
        (&["--spill", empty, "--spill", empty], "--spill", ""),
    ];
    for &(argv, flag, why) in cases {
        let refused = refusal("dmrg", argv, dmrg::Args::prepare);
        assert!(refused.1.contains(why), "{argv:?}: {}", refused.1);
        check("dmrg", argv, flag, refused);
    }
    // --resume is checked before --save creates anything.
    let fresh = dir.join("fresh");
    let (code, text) = refusal(
        "dmrg",
        &["--resume", missing, "--save", fresh.to_str().unwrap()],
        dmrg::Args::prepare,
    );
    assert_eq!(code, 2, "{text}");
    assert!(!fresh.exists());
    assert!(!Path::new(missing).exists());
    // Usable directories are accepted (and created), and nothing is left in them.
    let save = dir.join("new").join("checkpoints");
    let p =
        dmrg::Args::try_parse_from(["dmrg", "--save", save.to_str().unwrap(), "--spill", empty])
            .unwrap()
            .prepare()
            .unwrap();
    assert_eq!(p.args.save.as_deref(), Some(save.as_path()));
    assert_eq!(std::fs::read_dir(&save).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(empty).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn task_graph_refuses_bad_flags_naming_them() {
    let cases: &[(&[&str], &str)] = &[
        (&["--records", "abc"], "--records"),
        (&["--records", "2"], "--records"),
        (&["--records", "-1"], "--records"),
        (&["--rounds", "0"], "--rounds"),
        (&["--rounds"], "--rounds"),
        (&["--threads", "-1"], "--threads"),
        (&["--records", "1000000", "--rounds", "1000000"], "--rounds"),
        (&["--rounds", "5", "--rounds", "6"], "--rounds"),
        (&["--records", "8", "--unknown", "3"], "--unknown"),
    ];
    for &(argv, flag) in cases {
        check(
            "task_graph",
            argv,
            flag,
            refusal("task_graph", argv, task_graph::Args::prepare),
        );
    }
}

#[test]
fn block_gemm_refuses_bad_flags_and_runs_too_big_for_the_memory() {
    let dir = scratch("gemm-flags");
    let json = dir.join("r.json");
    let json = json.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--sizes", "fixed:100000000"], "--sizes"),
        (&["--sectors", "100000000"], "--sectors"),
        (&["--sectors", "0"], "--sectors"),
        (&["--sizes", "fixed:0"], "--sizes"),
        (&["--sizes", "uniform:9-3"], "--sizes"),
        (&["--sizes", "list:4,,8"], "--sizes"),
        (&["--sizes", "gauss:4"], "--sizes"),
        (
            &["--sizes", "fixed:100000", "--max-memory", "64"],
            "--sizes",
        ),
        (
            &[
                "--sizes",
                "fixed:1048576",
                "--sectors",
                "65536",
                "--max-memory",
                "1048576",
            ],
            "--sizes",
        ),
        (&["--max-memory", "0"], "--max-memory"),
        (&["--reps", "0"], "--reps"),
        (&["--type", "f16"], "--type"),
        (&["--backend", "tpu"], "--backend"),
        (&["--lanes", "2"], "--lanes"),
        (&["--lanes", "0", "--backend", "cuda"], "--lanes"),
        (&["--seed", "-1"], "--seed"),
        (&["--reps", "3", "--reps", "4"], "--reps"),
        (&["--json"], "--json"),
    ];
    for &(argv, flag) in cases {
        // Every run's report goes to the scratch directory, unless the case is about --json.
        let mut argv = argv.to_vec();
        if !argv.contains(&"--json") {
            argv.extend(["--json", json]);
        }
        let argv = &argv[..];
        check(
            "block_gemm",
            argv,
            flag,
            refusal("block_gemm", argv, block_gemm::Args::prepare),
        );
    }
    #[cfg(not(feature = "cuda"))]
    check(
        "block_gemm",
        &["--backend", "cuda"],
        "--backend",
        refusal(
            "block_gemm",
            &["--backend", "cuda", "--json", json],
            block_gemm::Args::prepare,
        ),
    );
    // Refused before --json was opened: nothing was created.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn defaults_and_range_edges_are_accepted() {
    let a = dmrg::Args::try_parse_from(["dmrg"]).unwrap();
    assert_eq!(
        (a.sites, a.chi, a.sweeps, a.tol, a.threads),
        (32, 128, 20, 1e-10, 0)
    );
    assert!(a.trace.is_none());
    assert!(a.save.is_none() && a.resume.is_none() && a.spill.is_none());
    let a = dmrg::Args::try_parse_from([
        "dmrg", "--sites", "2", "--chi", "1", "--sweeps", "1", "--tol", "0",
    ])
    .unwrap();
    assert_eq!((a.sites, a.chi, a.sweeps, a.tol), (2, 1, 1, 0.0));

    let t = task_graph::Args::try_parse_from(["task_graph", "--records", "3", "--rounds", "1"])
        .unwrap()
        .prepare()
        .unwrap();
    assert_eq!(t.tasks, 3);
    let t =
        task_graph::Args::try_parse_from(["task_graph", "--records", "4096", "--rounds", "16384"])
            .unwrap()
            .prepare()
            .unwrap();
    assert_eq!(t.tasks, task_graph::MAX_TASKS);

    let dir = scratch("gemm-ok");
    let json = dir.join("r.json");
    let g = block_gemm::Args::try_parse_from([
        "block_gemm",
        "--sizes",
        "list:3,5",
        "--sectors",
        "3",
        "--type",
        "c64",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(g.reps, 5);
    assert_eq!(g.sizes, SizeDist::List(vec![3, 5]));
    let p = g.prepare().unwrap();
    assert_eq!(p.dims, [3, 5, 3]);
    // Opened before the run: it exists now; never written, it is removed again.
    assert!(json.exists());
    drop(p);
    assert!(!json.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn threads_zero_means_every_core_and_says_how_many() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let t = Threads::resolve(0);
    assert_eq!(t.count, cores);
    assert_eq!(
        t.to_string(),
        format!(
            "{cores} thread{} (--threads 0: all cores)",
            if cores == 1 { "" } else { "s" }
        )
    );
    assert_eq!(Threads::resolve(3).count, 3);
    assert_eq!(Threads::resolve(3).to_string(), "3 threads");
    assert_eq!(Threads::resolve(1).to_string(), "1 thread");
    let p = dmrg::Args::try_parse_from(["dmrg", "--threads", "0"])
        .unwrap()
        .prepare()
        .unwrap();
    assert_eq!(p.threads.count, cores);
    let p = task_graph::Args::try_parse_from(["task_graph"])
        .unwrap()
        .prepare()
        .unwrap();
    assert_eq!(p.threads.count, cores);
}

#[test]
fn outputs_are_opened_before_the_run_and_an_unwritable_one_is_named() {
    let dir = scratch("outputs");
    // A directory that does not exist, and a path that is a directory.
    let missing = dir.join("no-such-dir").join("t.json");
    for path in [missing.as_path(), dir.as_path()] {
        let p = path.to_str().unwrap();
        for (flag, (code, text)) in [
            (
                "--trace",
                refusal("dmrg", &["--trace", p], dmrg::Args::prepare),
            ),
            (
                "--trace",
                refusal("task_graph", &["--trace", p], task_graph::Args::prepare),
            ),
            (
                "--json",
                refusal(
                    "block_gemm",
                    &["--sectors", "1", "--sizes", "fixed:2", "--json", p],
                    block_gemm::Args::prepare,
                ),
            ),
        ] {
            assert_eq!(code, 2, "{text}");
            assert!(
                text.contains(flag) && text.contains(p),
                "{flag} {p} not named in:\n{text}"
            );
        }
    }
    assert!(!dir.join("no-such-dir").exists());

    // An existing file is kept as it was until the run writes it.
    let old = dir.join("old.json");
    std::fs::write(&old, "before").unwrap();
    let p = dmrg::Args::try_parse_from(["dmrg", "--trace", old.to_str().unwrap()])
        .unwrap()
        .prepare()
        .unwrap();
    drop(p);
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "before");
    let p = task_graph::Args::try_parse_from(["task_graph", "--trace", old.to_str().unwrap()])
        .unwrap()
        .prepare()
        .unwrap();
    let out = p.trace.expect("--trace given");
    assert_eq!(out.path(), Path::new(&old));
    out.write(b"{}").unwrap();
    assert_eq!(std::fs::read_to_string(&old).unwrap(), "{}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn memory_need_is_counted_checked() {
    // Blocks 2, 3 of f64: A, B, C hold 3 (4 + 9) elements; the dense side is round(35^(1/3)) = 3.
    let m = Memory::of(&[2, 3], ScalarType::F64).unwrap();
    assert_eq!(
        m,
        Memory {
            blocks: 3 * 13 * 8,
            dense_side: 3,
            dense: 3 * 9 * 8
        }
    );
    let m = Memory::of(&[4], ScalarType::C64).unwrap();
    assert_eq!(
        (m.blocks, m.dense_side, m.dense),
        (3 * 16 * 16, 4, 3 * 16 * 16)
    );
    // The largest run the flags describe is counted exactly, far past the largest
    // --max-memory.
    let side = block_gemm::MAX_SIDE;
    let sectors = block_gemm::MAX_SECTORS as usize;
    let m = Memory::of(&vec![side; sectors], ScalarType::C64).unwrap();
    assert_eq!(m.blocks, 3 * 16 * (side as u128).pow(2) * sectors as u128);
    assert!(m.total() > u128::from(block_gemm::MAX_MEMORY_GIB) << 30);
    // Sides no flag admits overflow u128 and say so instead of wrapping.
    assert_eq!(Memory::of(&[usize::MAX; 4], ScalarType::C64), None);
}

#[test]
fn size_distributions_draw_within_their_bounds() {
    assert_eq!(SizeDist::parse("fixed:7").unwrap().draw(3, 0), [7, 7, 7]);
    assert_eq!(
        SizeDist::parse("list:1, 2,3").unwrap().draw(5, 0),
        [1, 2, 3, 1, 2]
    );
    let u = SizeDist::parse("uniform:10-20").unwrap();
    let d = u.draw(200, 9);
    assert!(d.iter().all(|x| (10..=20).contains(x)));
    assert!(d.iter().any(|&x| x != d[0]));
    assert_eq!(d, u.draw(200, 9));
    for spec in ["fixed:4", "uniform:1-1048576", "list:3,5,8"] {
        assert_eq!(SizeDist::parse(spec).unwrap().to_string(), spec);
    }
    assert!(SizeDist::parse("fixed:1048577").is_err());
}

/// Every driver's flags are valid clap definitions (clap's own consistency checks).
#[test]
fn flag_definitions_are_consistent() {
    dmrg::Args::command().debug_assert();
    task_graph::Args::command().debug_assert();
    block_gemm::Args::command().debug_assert();
}

/// The refusal end to end: the built example exits with status 2 and names the flag, with
/// no panic (the driver before clap panicked on `--records abc`).
#[test]
fn a_bad_flag_exits_with_status_2_end_to_end() {
    let mut cargo = std::process::Command::new(env!("CARGO"));
    cargo.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "run",
        "--quiet",
        "--example",
        "task_graph",
    ]);
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    let out = cargo
        .args(["--", "--records", "abc"])
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("--records"), "stderr:\n{stderr}");
    assert!(stderr.contains("Usage: task_graph"), "stderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "stderr:\n{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing ran: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The `dmrg` example run by cargo with `argv`: its exit status, stdout and stderr.
fn run_dmrg(argv: &[&str]) -> (Option<i32>, String, String) {
    common::run_example("dmrg", argv)
}

/// The `E0 = ...` line of a run's stdout.
fn ground_energy(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("E0 = "))
        .unwrap_or_else(|| panic!("no E0 line in:\n{stdout}"));
    line.trim().parse().unwrap()
}

/// `--save`, `--resume` and `--spill` end to end: a run resumed from the checkpoint of its
/// first sweeps and a run with its environments on disk print the E0 of the run straight
/// through; a checkpoint of another size is refused; progress on a pipe is plain lines.
#[test]
fn dmrg_saves_resumes_and_spills_end_to_end() {
    let dir = scratch("dmrg-e2e");
    let ck = dir.join("ck");
    let spill = dir.join("spill");
    let (ck, spill) = (ck.to_str().unwrap(), spill.to_str().unwrap());
    let base = [
        "--sites",
        "12",
        "--chi",
        "16",
        "--tol",
        "0",
        "--threads",
        "2",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let run = |extra: &[&str]| {
        let argv = with(extra);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = run_dmrg(&argv);
        assert_eq!(
            code,
            Some(0),
            "{argv:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        assert!(
            !stderr.contains('\r'),
            "carriage return on a pipe:\n{stderr}"
        );
        (stdout, stderr)
    };
    let (straight, stderr) = run(&["--sweeps", "4"]);
    assert!(
        stderr.contains("sweep 1 step"),
        "no progress line:\n{stderr}"
    );
    let straight = ground_energy(&straight);
    let (first, _) = run(&["--sweeps", "2", "--save", ck]);
    assert!(Path::new(ck).join("dmrg.npz").is_file(), "{first}");
    let (resumed, _) = run(&["--sweeps", "4", "--resume", ck]);
    assert!(resumed.contains("resumed from"), "{resumed}");
    let resumed = ground_energy(&resumed);
    assert!(
        (resumed - straight).abs() < 1e-12,
        "{resumed} vs {straight}"
    );
    let (spilled, _) = run(&["--sweeps", "4", "--spill", spill]);
    let spilled = ground_energy(&spilled);
    assert!(
        (spilled - straight).abs() < 1e-12,
        "{spilled} vs {straight}"
    );
    assert_eq!(
        std::fs::read_dir(spill).unwrap().count(),
        0,
        "spill files left"
    );
    // Another chain length: a typed error naming what differs, status 1, nothing run.
    let (code, stdout, stderr) = run_dmrg(&["--sites", "10", "--chi", "16", "--resume", ck]);
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("number of sites: expected 10 (the MPO's), found 12"),
        "{stderr}"
    );
    assert!(!stdout.contains("E0"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--model` and `--json` end to end: a Hubbard chain whose E0 is the exact one of the same
/// terms (checked against exact diagonalisation in mps/tests/dmrg_models.rs at L = 6) and a
/// measurement report with an entry per bond and the electron operators.
#[test]
fn dmrg_runs_a_model_by_name_and_writes_its_measurements() {
    let dir = scratch("dmrg-model");
    let json = dir.join("m.json");
    let argv = [
        "--model",
        "hubbard:U=4,t=1",
        "--sites",
        "6",
        "--chi",
        "64",
        "--threads",
        "2",
        "--json",
        json.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = run_dmrg(&argv);
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("Hubbard chain L=6"), "{stdout}");
    let e = ground_energy(&stdout);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["sites"], 6);
    assert!((report["energy"].as_f64().unwrap() - e).abs() < 1e-12);
    assert_eq!(
        report["entanglement"].as_array().unwrap().len(),
        5,
        "{report}"
    );
    let density = report["one_site"]["Ntot"].as_array().unwrap();
    let total: f64 = density.iter().map(|x| x.as_f64().unwrap()).sum();
    assert!((total - 6.0).abs() < 1e-9, "half filling: {total}");
    std::fs::remove_dir_all(&dir).unwrap();
}
