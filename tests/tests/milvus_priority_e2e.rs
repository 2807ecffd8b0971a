//! Milvus as `deploy/start-milvus.sh` starts it searches at its own CPU priority. knowhere,
//! Milvus' vector library, starts every thread of its pools at nice 19, its search threads too;
//! the launcher (`deploy/milvus_launch.py`) sets each search thread back to the nice value Milvus
//! runs at, and leaves the index builds at 19. Where raising a thread's priority is not
//! permitted (no CAP_SYS_NICE), the launcher says so in Milvus' log instead.
//!
//! Needs Milvus standalone from `deploy/test.sh` (FRESHET_MILVUS_URL, FRESHET_RUN_DIR) and fails
//! without it. Its collection is `freshet_t_priority_<pid>`, dropped at the start and the end.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use freshet_milvus::{ChunkFilter, MilvusConfig, MilvusSink};
use freshet_operators::testing::{chunk, unit_vector};
use freshet_tests::{env, may_raise_priority, nice, process_group, threads};

const DIM: usize = 16;
/// Above the 1,024 rows Milvus indexes a sealed segment from, so that flushing them builds an
/// index (and starts knowhere's build threads).
const ROWS: u64 = 1500;

/// (thread name, nice) of every thread of `pids` whose name starts with `prefix`.
fn threads_named(pids: &[u32], prefix: &str) -> Vec<(String, i64)> {
    pids.iter()
        .flat_map(|p| threads(*p))
        .filter(|(name, _)| name.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn milvus_searches_at_its_own_priority_and_builds_indexes_below_it() -> Result<()> {
    let run_dir = PathBuf::from(env("FRESHET_RUN_DIR"));
    let cfg = MilvusConfig {
        url: env("FRESHET_MILVUS_URL"),
        collection: format!("freshet_t_priority_{}", std::process::id()),
        dim: DIM,
        model_id: "test/model-a".to_owned(),
        timeout: Duration::from_secs(60),
        flush_rows: 0,
        flush_interval: Duration::ZERO,
        ..MilvusConfig::default()
    };
    let sink = MilvusSink::connect(cfg).await?;
    sink.drop_collection().await?;
    sink.ensure_collection().await?;
    let rows: Vec<_> = (0..ROWS)
        .map(|i| {
            let text = format!("text {i}");
            (chunk(&format!("doc{i}"), &text), unit_vector(i, DIM))
        })
        .collect();
    sink.upsert(&rows).await?;
    sink.flush().await?;
    // Searches start knowhere's search threads; the flushed segment's index build its build
    // threads. The launcher looks for new search threads once a second.
    let pids = process_group(&run_dir.join("pids/milvus.pid"))?;
    let milvus_nice = pids
        .iter()
        .filter_map(|p| nice(*p).ok())
        .min()
        .context("no nice value for Milvus' processes")?;
    let raise = may_raise_priority()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (search, build) = loop {
        for i in 0..20 {
            sink.search(&unit_vector(i, DIM), 5, &ChunkFilter::none())
                .await?;
        }
        let search = threads_named(&pids, "Knowhere_Search");
        let build = threads_named(&pids, "Knowhere_Build");
        let settled = search.iter().all(|(_, n)| *n == milvus_nice);
        if (!search.is_empty() && !build.is_empty() && (settled || !raise))
            || Instant::now() > deadline
        {
            break (search, build);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    sink.drop_collection().await?;
    ensure!(
        !search.is_empty(),
        "no knowhere search thread in Milvus' processes {pids:?}"
    );
    ensure!(
        !build.is_empty(),
        "no knowhere build thread in Milvus' processes {pids:?}"
    );
    ensure!(
        build.iter().all(|(_, n)| *n == 19),
        "index builds run below Milvus (knowhere's nice 19): {build:?}"
    );
    if raise {
        ensure!(
            search.iter().all(|(_, n)| *n == milvus_nice),
            "every search thread runs at Milvus' nice {milvus_nice}: {search:?}"
        );
    } else {
        let log = std::fs::read_to_string(run_dir.join("logs/milvus.log"))?;
        ensure!(
            log.contains("cannot raise Milvus' search threads"),
            "without CAP_SYS_NICE the launcher warns that the search threads stay at 19"
        );
    }
    eprintln!("Milvus at nice {milvus_nice}: search threads {search:?}, build threads {build:?}");
    Ok(())
}
