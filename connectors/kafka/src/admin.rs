//! Topic administration: create topics if missing, discover a topic's partitions.

use std::thread;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::client::{client_config, TracingContext, REQUEST_TIMEOUT};
use crate::{Error, KafkaConfig, Result};

/// How long [`partitions`] waits for a topic to appear.
pub const DEFAULT_PARTITIONS_TIMEOUT: Duration = Duration::from_secs(30);

fn admin_client(cfg: &KafkaConfig) -> Result<AdminClient<TracingContext>> {
    client_config(cfg, &[], &[])
        .create_with_context(TracingContext)
        .map_err(Error::kafka("creating admin client"))
}

/// Creates topic `name` with `partitions` partitions unless it exists, then waits until its
/// metadata is visible. An existing topic is left as it is (a partition count different from
/// `partitions` is logged, not changed).
///
/// The replication factor is the broker's default (`-1`), falling back to `1` for brokers that
/// do not support defaulting it.
pub fn ensure_topic(cfg: &KafkaConfig, name: &str, partitions: i32) -> Result<()> {
    ensure_topic_with_configs(cfg, name, partitions, &[])
}

/// [`ensure_topic`], creating the topic with these topic `configs` (`cleanup.policy`, ...). An
/// existing topic keeps its own: check them with [`topic_configs`].
pub fn ensure_topic_with_configs(
    cfg: &KafkaConfig,
    name: &str,
    partitions: i32,
    configs: &[(&str, String)],
) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument("empty topic name".into()));
    }
    if partitions < 1 {
        return Err(Error::InvalidArgument(format!(
            "topic {name:?}: partition count must be positive, got {partitions}"
        )));
    }
    let admin = admin_client(cfg)?;
    let opts = AdminOptions::new()
        .request_timeout(Some(REQUEST_TIMEOUT))
        .operation_timeout(Some(REQUEST_TIMEOUT));

    let mut replication = -1;
    loop {
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let results = futures_executor::block_on(admin.create_topics([&topic], &opts))
            .map_err(Error::kafka("creating topic"))?;
        let outcome = results.into_iter().next().unwrap_or(Ok(name.to_string()));
        match outcome {
            Ok(_) => {
                tracing::info!(topic = name, partitions, "created topic");
                break;
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                tracing::debug!(topic = name, "topic exists");
                break;
            }
            Err((_, RDKafkaErrorCode::InvalidReplicationFactor))
            | Err((_, RDKafkaErrorCode::InvalidRequest))
                if replication == -1 =>
            {
                tracing::debug!(
                    topic = name,
                    "broker needs an explicit replication factor; using 1"
                );
                replication = 1;
            }
            Err((_, code)) => {
                return Err(Error::CreateTopic {
                    topic: name.to_string(),
                    code,
                })
            }
        }
    }

    let found = wait_for_partitions(&admin, name, DEFAULT_PARTITIONS_TIMEOUT)?;
    if found.len() != partitions as usize {
        tracing::warn!(
            topic = name,
            wanted = partitions,
            found = found.len(),
            "topic exists with a different partition count; leaving it as it is"
        );
    }
    Ok(())
}

/// The configs of `topic` as the broker reports them (`DescribeConfigs`): each name with its
/// value (`None`: the broker hides it, e.g. a sensitive one).
pub fn topic_configs(cfg: &KafkaConfig, topic: &str) -> Result<BTreeMap<String, Option<String>>> {
    let admin = admin_client(cfg)?;
    let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let resource = ResourceSpecifier::Topic(topic);
    let results = futures_executor::block_on(admin.describe_configs([&resource], &opts))
        .map_err(Error::kafka("describing topic configs"))?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| Error::Fatal(format!("no configs returned for topic {topic:?}")))?
        .map_err(|code| Error::Fatal(format!("describing topic {topic:?}: {code}")))?;
    Ok(resource
        .entries
        .into_iter()
        .map(|e| (e.name, e.value))
        .collect())
}

/// The partition ids of `topic`, ascending. Retries until the topic exists and has partitions,
/// for up to [`DEFAULT_PARTITIONS_TIMEOUT`].
pub fn partitions(cfg: &KafkaConfig, topic: &str) -> Result<Vec<i32>> {
    partitions_with_timeout(cfg, topic, DEFAULT_PARTITIONS_TIMEOUT)
}

/// [`partitions`] with an explicit timeout.
pub fn partitions_with_timeout(
    cfg: &KafkaConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>> {
    let admin = admin_client(cfg)?;
    wait_for_partitions(&admin, topic, timeout)
}

fn wait_for_partitions(
    admin: &AdminClient<TracingContext>,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(50);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let problem = match admin.inner().fetch_metadata(
            Some(topic),
            left.clamp(Duration::from_millis(100), REQUEST_TIMEOUT),
        ) {
            Ok(md) => {
                let found = md.topics().iter().find(|t| t.name() == topic);
                match found {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
                        ids.sort_unstable();
                        return Ok(ids);
                    }
                    Some(t) => match t.error() {
                        Some(e) => format!("topic error: {}", RDKafkaErrorCode::from(e)),
                        None => "topic has no partitions yet".to_string(),
                    },
                    None => "topic not in metadata".to_string(),
                }
            }
            Err(KafkaError::MetadataFetch(code)) if crate::client::is_permanent(code) => {
                return Err(Error::Kafka {
                    op: "fetching metadata",
                    source: KafkaError::MetadataFetch(code),
                })
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("partitions of topic {topic:?} ({problem})"),
                waited: timeout,
            });
        }
        tracing::debug!(topic, problem = %problem, "waiting for topic metadata");
        thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
