//! A process killed (SIGKILL) in the middle of a save leaves the previous checkpoint intact.
//!
//! The test re-executes its own binary with `TESSERA_IO_KILL_CHILD` set: the child saves a
//! large tensor over the same path in a loop (iteration `i` saves the tensor of seed `i` and
//! metadata `i`); the parent waits until a temporary file shows that a save is under way,
//! kills the child, and loads the path: it must hold a complete checkpoint, the tensor of
//! the seed its metadata names.

use std::path::Path;
use std::time::{Duration, Instant};
use tessera_blocks::{AsyncArray, BlockStructure, Direction, Leg, U1};
use tessera_io::Checkpoint;

const CHILD: &str = "TESSERA_IO_KILL_CHILD";

fn tensor(seed: u64, dim: usize) -> AsyncArray<f64, U1> {
    let l = Leg::new(Direction::In, [(U1(0), dim), (U1(1), dim)]).unwrap();
    let s = BlockStructure::new([l.clone()], [l.dual()], U1(0)).unwrap();
    AsyncArray::random(s, seed)
}

fn save(path: &Path, seed: u64, dim: usize) {
    let mut ck = Checkpoint::new();
    ck.put_tensor("t", &tensor(seed, dim)).unwrap();
    ck.put_i64s("seed", &[seed as i64, dim as i64]);
    ck.save(path).unwrap();
}

#[test]
fn a_save_killed_midway_leaves_the_previous_checkpoint() {
    if let Ok(path) = std::env::var(CHILD) {
        // The child: save ~64 MB checkpoints forever.
        for seed in 1.. {
            save(Path::new(&path), seed, 2000);
        }
        return;
    }
    let dir = std::env::temp_dir().join(format!("tessera-io-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.npz");
    save(&path, 0, 10);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_save_killed_midway_leaves_the_previous_checkpoint",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let in_flight = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains(".tmp-"))
    };
    while !in_flight() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the child never started a save"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let it write part of the file.
    std::thread::sleep(Duration::from_millis(20));
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    assert!(
        in_flight(),
        "the kill did not land mid-save; the test proves nothing"
    );

    let ck = Checkpoint::load(&path).unwrap();
    let meta = ck.i64s("seed").unwrap();
    let (seed, dim) = (meta[0] as u64, meta[1] as usize);
    let t = ck.tensor::<f64, U1>("t").unwrap();
    assert_eq!(
        t.to_blocks().unwrap(),
        tensor(seed, dim).to_blocks().unwrap()
    );
    println!("killed mid-save; loaded the intact checkpoint of seed {seed}");

    // The next save removes the killed child's temporary file (its process is gone) and
    // leaves a file of a live process alone (this one's id stands for one).
    let live = dir.join(format!(".state.npz.tmp-{}-999", std::process::id()));
    std::fs::write(&live, b"another save in flight").unwrap();
    save(&path, 7, 10);
    if Path::new("/proc/self").exists() {
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.contains(".tmp-"))
            .collect();
        assert_eq!(
            left,
            [live.file_name().unwrap().to_string_lossy()],
            "{left:?}"
        );
    }
    assert_eq!(Checkpoint::load(&path).unwrap().i64s("seed").unwrap()[0], 7);
    std::fs::remove_dir_all(&dir).unwrap();
}
