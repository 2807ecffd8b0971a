//! The sink as a timely operator (on worker 0): it stashes each epoch's messages until the epoch
//! is complete and hands complete epochs to a writer thread ([`SinkWriter`]), which applies them
//! with [`apply_epochs`]. The operator holds the capability of every epoch until the writer
//! reports it durable in both indexes, so a probe after it tells every worker which offsets it
//! may commit.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};

use freshet_operators::dataflow::Time;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;
use timely::scheduling::SyncActivator;

use super::{apply_epochs, SinkMsg, Sinks};

/// Set when the sink cannot go on; the driver stops the pipeline without committing.
pub type Fatal = Arc<Mutex<Option<String>>>;

/// Routes every message to worker 0, where complete epochs go to a writer thread
/// ([`SinkWriter`]) one batch at a time: while it writes, worker 0 keeps reading and computing,
/// and everything that completes meanwhile forms the next batch. The capabilities of a batch
/// are held until the writer reports it durable.
pub fn sink<'s>(
    input: Stream<'s, Time, Vec<SinkMsg>>,
    sinks: Option<Sinks>,
    fatal: Fatal,
) -> Stream<'s, Time, Vec<()>> {
    let scope = input.scope();
    let is_sink_worker = scope.index() == 0;
    input.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
        Exchange::new(|_m: &SinkMsg| 0u64),
        "Sink",
        move |_cap, info| {
            let activator = scope.worker().sync_activator_for(info.address.to_vec());
            let mut writer = sinks.map(|s| SinkWriter::spawn(s, activator));
            let mut stash: BTreeMap<Time, (Capability<Time>, Vec<SinkMsg>)> = BTreeMap::new();
            let mut in_flight: Option<Vec<Capability<Time>>> = None;
            let fail = move |msg: String, caps: Option<Vec<Capability<Time>>>| {
                tracing::error!(error = %msg, "sink failed; stopping without committing");
                if let Ok(mut f) = fatal.lock() {
                    f.get_or_insert(msg);
                }
                // Keep the capabilities: nothing after this point may be committed.
                std::mem::forget(caps);
            };
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    for msg in data.drain(..) {
                        let time = *cap.least().expect("a message has a time");
                        stash
                            .entry(time)
                            .or_insert_with(|| {
                                (cap.delayed(&time, output.output_index()), Vec::new())
                            })
                            .1
                            .push(msg);
                    }
                });
                let Some(w) = writer.as_mut() else {
                    // Every message is routed to worker 0, which has the sinks. Worker 0 without
                    // them (a failed start) keeps every capability, so that no epoch ever looks
                    // durable and no offset is committed for what was never written.
                    if !is_sink_worker {
                        stash.clear();
                    }
                    return;
                };
                if w.failed {
                    return;
                }
                match w.done.try_recv() {
                    Ok(Ok(())) => in_flight = None,
                    Ok(Err(msg)) => {
                        w.failed = true;
                        fail(msg, in_flight.take());
                        return;
                    }
                    Err(mpsc::TryRecvError::Empty) => {}
                    Err(mpsc::TryRecvError::Disconnected) => {
                        if in_flight.is_some() {
                            w.failed = true;
                            fail("the sink writer thread ended".into(), in_flight.take());
                            return;
                        }
                    }
                }
                if in_flight.is_some() {
                    return;
                }
                let complete: Vec<Time> = stash
                    .keys()
                    .copied()
                    .take_while(|t| !frontier.less_equal(t))
                    .collect();
                if complete.is_empty() {
                    return;
                }
                let mut epochs = Vec::new();
                let mut caps = Vec::new();
                for t in &complete {
                    if let Some((cap, msgs)) = stash.remove(t) {
                        epochs.push((*t, msgs));
                        caps.push(cap);
                    }
                }
                if w.jobs.as_ref().is_none_or(|j| j.send(epochs).is_err()) {
                    w.failed = true;
                    fail("the sink writer thread is gone".into(), Some(caps));
                    return;
                }
                in_flight = Some(caps);
            }
        },
    )
}

/// Epochs handed to the writer thread as one batch.
type Batch = Vec<(Time, Vec<SinkMsg>)>;

/// The thread that owns the [`Sinks`] and applies batches in order with [`apply_epochs`],
/// reporting each result and waking the sink operator.
pub struct SinkWriter {
    jobs: Option<mpsc::Sender<Batch>>,
    done: mpsc::Receiver<std::result::Result<(), String>>,
    thread: Option<std::thread::JoinHandle<()>>,
    failed: bool,
}

impl SinkWriter {
    fn spawn(mut sinks: Sinks, activator: SyncActivator) -> SinkWriter {
        let (jobs, inbox) = mpsc::channel::<Batch>();
        let (report, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("freshet-sink".into())
            .spawn(move || {
                for batch in inbox {
                    let result = apply_epochs(&mut sinks, batch).map_err(|e| format!("{e:#}"));
                    let failed = result.is_err();
                    if report.send(result).is_err() {
                        break;
                    }
                    let _ = activator.activate();
                    if failed {
                        break;
                    }
                }
            });
        match thread {
            Ok(t) => SinkWriter {
                jobs: Some(jobs),
                done,
                thread: Some(t),
                failed: false,
            },
            // No thread: the first batch reports the failure through the closed channel.
            Err(e) => {
                tracing::error!(error = %e, "cannot start the sink writer thread");
                SinkWriter {
                    jobs: None,
                    done,
                    thread: None,
                    failed: false,
                }
            }
        }
    }
}

impl Drop for SinkWriter {
    /// Lets the thread finish its batch and close the indexes.
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use timely::dataflow::operators::{Input, Probe};
    use timely::dataflow::ProbeHandle;

    use super::*;
    use crate::sink::plan;

    /// Worker 0 without sinks never lets an epoch look durable: what it was sent stays
    /// unwritten, so no offset may be committed for it.
    #[test]
    fn worker_0_without_sinks_holds_every_epoch() {
        let fatal: Fatal = Arc::new(Mutex::new(None));
        timely::execute_directly(move |worker| {
            let probe = ProbeHandle::new();
            let mut input = worker.dataflow::<Time, _, _>(|scope| {
                let (input, stream) = scope.new_input::<Vec<SinkMsg>>();
                sink(stream, None, fatal.clone()).probe_with(&probe);
                input
            });
            input.send(SinkMsg::Progress {
                next_offsets: BTreeMap::from([(
                    plan::TopicPartition {
                        topic: 0,
                        partition: 0,
                    },
                    5,
                )]),
                timestamps_ms: vec![],
                records: vec![],
                refused: vec![],
                removals: vec![],
            });
            input.advance_to(2);
            for _ in 0..50 {
                worker.step();
            }
            assert!(probe.less_equal(&1), "epoch 1 must not look durable");
            input.close();
            for _ in 0..50 {
                worker.step();
            }
            assert!(!probe.done(), "not even after the input closes");
            for id in worker.installed_dataflows() {
                worker.drop_dataflow(id);
            }
        });
    }
}
