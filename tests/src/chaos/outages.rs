//! Outages inside a crash trial (docs/faults.md, "Outages"): the trial's own broker SIGKILLed
//! and restarted, its own Milvus SIGKILLed and restarted after a delay, and the query node
//! SIGKILLed and restarted while [`super::queries`] asks it continuously. Each happens once per
//! trial, in a run and before a record that the seed picks, while the history streams in.
//!
//! A run that hosts a broker or Milvus outage is not armed at a kill point. Once the outage
//! is over, the trial waits until the pipeline has indexed everything sent so far (it resumed),
//! and only then kills it. A pipeline that stops with an error during such an outage (it does
//! when Milvus stays away past its write retries) is started again once the service is back,
//! as a supervisor would, and counted; one that exits successfully, or by a signal, fails the
//! trial.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Result};
use freshet_operators::chunk::ChunkKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::stack::{Service, Services};
use crate::query::QueryNode;
use crate::Case;

/// Which outages trials have, and how long Milvus stays down at most.
#[derive(Clone, Debug)]
pub struct Config {
    pub broker: bool,
    pub milvus: bool,
    pub query: bool,
    pub milvus_down_max: Duration,
}

impl Config {
    pub fn none() -> Config {
        Config {
            broker: false,
            milvus: false,
            query: false,
            milvus_down_max: Duration::ZERO,
        }
    }

    /// As `FRESHET_CHAOS_OUTAGES` names them.
    pub fn names(&self) -> String {
        let on: Vec<&str> = [
            (self.broker, "broker"),
            (self.milvus, "milvus"),
            (self.query, "query"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

/// Restarts of a pipeline stopped by an outage, per trial, before the trial fails.
const MAX_RESTARTS: usize = 5;

/// The case's Milvus ids, asking again for up to 2 minutes while Milvus answers an error: after
/// a restart, Milvus loads its collections again in the background, and answers "collection not
/// loaded" until then.
fn milvus_ids_once_loaded(case: &Case) -> Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match case.milvus_ids() {
            Ok(ids) => return Ok(ids),
            Err(e) if Instant::now() < deadline => {
                eprintln!("listing Milvus ids again: {e:#}");
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// When one outage happens: in run `life` (the clean run is the last), before its `op`-th
/// record, down for `down`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct When {
    pub life: usize,
    pub op: usize,
    pub down: Duration,
}

impl When {
    fn describe(&self, what: &str) -> String {
        format!(
            "{what} in run {} before record {}, down {} ms",
            self.life,
            self.op,
            self.down.as_millis()
        )
    }
}

/// The outages of a trial, from its seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub broker: Option<When>,
    pub milvus: Option<When>,
    pub query: Option<When>,
}

impl Plan {
    /// `running[l]`: the records run `l` receives while it runs.
    pub fn new(seed: u64, running: &[usize], cfg: &Config) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x07a6_e5d0_7a6e);
        let mut when = |on: bool, max_down_ms: u64| {
            let life = rng.gen_range(0..running.len());
            let op = rng.gen_range(0..=running[life]);
            let down = Duration::from_millis(rng.gen_range(0..=max_down_ms));
            on.then_some(When { life, op, down })
        };
        Plan {
            broker: when(cfg.broker, 3000),
            milvus: when(cfg.milvus, cfg.milvus_down_max.as_millis() as u64),
            query: when(cfg.query, 2000),
        }
    }

    /// Run `life` hosts a broker or Milvus outage.
    pub fn hosts(&self, life: usize) -> bool {
        [self.broker, self.milvus]
            .iter()
            .any(|w| w.is_some_and(|w| w.life == life))
    }
}

/// What the outages of a trial did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub broker: u32,
    pub milvus: u32,
    pub query: u32,
    /// Milvus: down (ms, from the kill to the restart's start) and restart time (ms).
    pub milvus_down_ms: u64,
    pub milvus_start_ms: u64,
    /// Pipeline runs that stopped with an error during an outage (first error line each).
    pub pipeline_exits: Vec<String>,
    /// Runs that caught up after their outages with Milvus equal to tantivy's commit.
    pub resumed: u32,
    /// Where each outage happened, e.g. `milvus in run 2 before record 13, down 4100 ms`.
    pub placed: Vec<String>,
}

/// Carries out a [`Plan`] while a trial runs.
pub struct Outages {
    pub plan: Plan,
    pub report: Report,
    services: Option<Services>,
    restarts: Vec<(Service, Instant, JoinHandle<Result<Duration>>)>,
    /// The query node and the address the query thread asks.
    pub node: Option<QueryNode>,
    pub addr: Arc<Mutex<String>>,
}

impl Outages {
    pub fn new(plan: Plan, services: Option<Services>) -> Outages {
        Outages {
            plan,
            report: Report::default(),
            services,
            restarts: Vec::new(),
            node: None,
            addr: Arc::new(Mutex::new(String::new())),
        }
    }

    fn services(&self) -> Result<&Services> {
        self.services
            .as_ref()
            .ok_or_else(|| anyhow!("broker and Milvus outages need the trials' own services"))
    }

    /// Starts the query node (again) for `case`.
    pub fn start_node(&mut self, case: &Case) -> Result<()> {
        let node =
            case.start_query(&[("FRESHET_QUERY_TRUST_REQUEST_PRINCIPALS", "true".into())])?;
        if let Ok(mut a) = self.addr.lock() {
            *a = node.addr.clone();
        }
        self.node = Some(node);
        Ok(())
    }

    /// Waits up to 2 minutes for the query node to answer a vector query with 200: after
    /// every outage, it serves the vector route again.
    pub fn node_serves_vectors(&self) -> Result<()> {
        let Some(node) = self.node.as_ref() else {
            return Ok(());
        };
        let body = serde_json::json!({
            "query": "river delta", "mode": "vector", "principals": ["group:a"],
            "filter": {"lang": "en"},
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let last = match node.post("/v1/retrieve", &body) {
                Ok(r) if r.status == 200 => return Ok(()),
                Ok(r) => format!("{}: {}", r.status, r.body),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "the query node does not serve vector queries again: {last}; log:\n{}",
                    node.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Called before run `life` sends its `op`-th record.
    pub fn before(&mut self, case: &Case, life: usize, op: usize) -> Result<()> {
        let at = |w: Option<When>| w.filter(|w| w.life == life && w.op == op);
        for (what, w) in [
            (Service::Broker, at(self.plan.broker)),
            (Service::Milvus, at(self.plan.milvus)),
        ] {
            let Some(w) = w else { continue };
            self.report
                .placed
                .push(w.describe(&format!("{what:?}").to_lowercase()));
            let services = self.services()?.clone();
            services.kill(what)?;
            let killed = Instant::now();
            let handle = std::thread::spawn(move || {
                std::thread::sleep(w.down);
                services.start(what)
            });
            self.restarts.push((what, killed, handle));
        }
        if let Some(w) = at(self.plan.query) {
            self.report.placed.push(w.describe("query node"));
            // Dropping the node SIGKILLs it.
            drop(self.node.take());
            std::thread::sleep(w.down);
            self.start_node(case)?;
            self.report.query += 1;
        }
        Ok(())
    }

    /// Called when run `life` has sent its records: waits for the services it took down to
    /// be back, starts the pipeline again if it stopped with an error meanwhile, waits until it
    /// has indexed everything sent so far, and checks that Milvus then holds exactly the leaf
    /// chunks of tantivy's commit.
    pub fn after(&mut self, case: &mut Case, life: usize) -> Result<()> {
        if !self.plan.hosts(life) {
            return Ok(());
        }
        for (what, killed, handle) in self.restarts.drain(..) {
            let started = handle
                .join()
                .map_err(|_| anyhow!("the {what:?} restart thread panicked"))??;
            match what {
                Service::Broker => self.report.broker += 1,
                Service::Milvus => {
                    self.report.milvus += 1;
                    self.report.milvus_start_ms = started.as_millis() as u64;
                    self.report.milvus_down_ms =
                        killed.elapsed().saturating_sub(started).as_millis() as u64;
                }
            }
        }
        // Supervised catch-up: a run stopped by the outage (or by Milvus still loading the
        // collection after its restart) is started again, a few times at most.
        let deadline = Instant::now() + super::CATCH_UP;
        loop {
            if let Some(status) = case.try_wait_pipeline()? {
                if status.success() || status.signal().is_some() {
                    bail!(
                        "run {life} ended with {status} during an outage; log:\n{}",
                        case.log_tail()
                    );
                }
                if self.report.pipeline_exits.len() >= MAX_RESTARTS {
                    bail!(
                        "run {life} stopped again after {MAX_RESTARTS} restarts ({status}); \
                         log:\n{}",
                        case.log_tail()
                    );
                }
                let tail = case.log_tail();
                // its first error line, else its last line
                let line = tail
                    .lines()
                    .find(|l| l.contains("ERROR"))
                    .or_else(|| tail.lines().last())
                    .unwrap_or("(empty log)");
                self.report
                    .pipeline_exits
                    .push(format!("run {life}: {status}: {line}"));
                case.start_pipeline()?;
            }
            if case.is_indexed() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "run {life} did not catch up within {:?} after its outage; log:\n{}",
                    super::CATCH_UP,
                    case.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // Caught up and idle: Milvus holds exactly the leaves of tantivy's commit, so no commit
        // went past what reached Milvus (a run that kept going never reconciled the two).
        let leaves: BTreeSet<String> = case
            .tantivy_chunks()?
            .into_iter()
            .filter(|c| c.kind == ChunkKind::Leaf)
            .map(|c| c.chunk_id)
            .collect();
        let rows: BTreeSet<String> = milvus_ids_once_loaded(case)?.into_iter().collect();
        ensure!(
            leaves == rows,
            "after the outage in run {life}, Milvus lacks {:?} and has extra {:?}",
            leaves.difference(&rows).take(5).collect::<Vec<_>>(),
            rows.difference(&leaves).take(5).collect::<Vec<_>>()
        );
        self.report.resumed += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_plan_within_the_runs_and_the_limits() {
        let cfg = Config {
            broker: true,
            milvus: true,
            query: true,
            milvus_down_max: Duration::from_secs(60),
        };
        let running = [40, 0, 17, 90, 3];
        let mut lives = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let plan = Plan::new(seed, &running, &cfg);
            assert_eq!(plan, Plan::new(seed, &running, &cfg));
            for (w, max) in [
                (plan.broker, 3000),
                (plan.milvus, 60_000),
                (plan.query, 2000),
            ] {
                let w = w.expect("every kind is on");
                assert!(w.op <= running[w.life], "{w:?}");
                assert!(w.down <= Duration::from_millis(max), "{w:?}");
                lives.insert(w.life);
            }
            for w in [plan.broker, plan.milvus].into_iter().flatten() {
                assert!(plan.hosts(w.life), "{plan:?}");
            }
        }
        assert_eq!(
            lives.len(),
            running.len(),
            "every run hosts outages for some seed"
        );
        // A kind that is off is never planned, and the others stay where they were.
        let only_query = Config {
            broker: false,
            milvus: false,
            ..cfg.clone()
        };
        let plan = Plan::new(7, &running, &only_query);
        assert_eq!((plan.broker, plan.milvus), (None, None));
        assert_eq!(plan.query, Plan::new(7, &running, &cfg).query);
        assert!((0..running.len()).all(|l| !plan.hosts(l)));
        // the names a failing trial's command line repeats
        assert_eq!(cfg.names(), "broker,milvus,query");
        assert_eq!(only_query.names(), "query");
        assert_eq!(Config::none().names(), "none");
    }
}
