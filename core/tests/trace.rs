//! The task timeline: one event per task, on the worker that ran it, as Chrome trace JSON.

use tessera_core::{Async, Runtime};

#[test]
fn a_trace_has_one_well_formed_event_per_task() {
    let rt = Runtime::new(2).unwrap();
    let values: Vec<Async<u64>> = (0..8).map(Async::new).collect();
    // Not recording: nothing is kept.
    rt.schedule(values[0].write(), |v| {
        *v += 1;
        Ok(())
    })
    .unwrap();
    values[0].wait().unwrap();
    rt.start_trace();
    let mut ids = Vec::new();
    for round in 0..10_u64 {
        for (i, v) in values.iter().enumerate() {
            let id = rt
                .schedule_named("bump", v.write(), move |v| {
                    *v = v.wrapping_mul(3).wrapping_add(round + i as u64);
                    Ok(())
                })
                .unwrap();
            ids.push(id);
        }
    }
    let failing = rt
        .schedule_named("fails", values[1].write(), |_| Err("on purpose".into()))
        .unwrap();
    for v in &values {
        let _ = v.wait();
    }
    let trace = rt.stop_trace();
    assert_eq!(
        trace.events.len(),
        ids.len() + 1,
        "one event per task run while recording"
    );
    let mut seen: Vec<_> = trace.events.iter().map(|e| e.task).collect();
    seen.sort();
    let mut want = ids.clone();
    want.push(failing);
    want.sort();
    assert_eq!(seen, want);
    assert!(trace.events.iter().all(|e| e.worker < 2));
    assert!(
        trace
            .events
            .iter()
            .any(|e| e.task == failing && e.failed && e.name == "fails")
    );
    // Tasks on one record ran one after another: their intervals do not overlap.
    let mut on_zero: Vec<_> = trace
        .events
        .iter()
        .filter(|e| ids.iter().step_by(8).any(|&id| id == e.task))
        .collect();
    on_zero.sort_by_key(|e| e.task);
    for w in on_zero.windows(2) {
        assert!(
            w[0].start + w[0].duration <= w[1].start,
            "{:?} then {:?}",
            w[0],
            w[1]
        );
    }
    // The Chrome trace-event structure that Perfetto reads.
    let json: serde_json::Value = serde_json::from_str(&trace.to_chrome_json()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), trace.events.len());
    for e in events {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
        assert!(e["tid"].as_u64().unwrap() < 2 && e["pid"] == 1);
        assert!(e["name"] == "bump" || e["name"] == "fails");
        assert!(e["args"]["task"].is_u64());
    }
    // Stopped: later tasks are not recorded.
    rt.schedule(values[2].write(), |_| Ok(())).unwrap();
    values[2].wait().unwrap();
    assert!(rt.stop_trace().events.is_empty());
}
