//! Client construction shared by every client of this crate: configuration layering and the
//! librdkafka -> `tracing` bridge.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::KafkaConfig;

/// Timeout of single metadata / offset / watermark requests.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a librdkafka configuration: `defaults`, then the user's `client_properties`, then
/// `enforced` (settings a client needs to behave as documented).
pub(crate) fn client_config(
    cfg: &KafkaConfig,
    defaults: &[(&str, &str)],
    enforced: &[(&str, &str)],
) -> ClientConfig {
    layered(cfg, defaults, &[&cfg.client_properties], enforced)
}

/// [`client_config`] for a consumer: `cfg.consumer_properties` go on top of
/// `cfg.client_properties` (still below `enforced`).
pub(crate) fn consumer_config(
    cfg: &KafkaConfig,
    defaults: &[(&str, &str)],
    enforced: &[(&str, &str)],
) -> ClientConfig {
    layered(
        cfg,
        defaults,
        &[&cfg.client_properties, &cfg.consumer_properties],
        enforced,
    )
}

fn layered(
    cfg: &KafkaConfig,
    defaults: &[(&str, &str)],
    layers: &[&BTreeMap<String, String>],
    enforced: &[(&str, &str)],
) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.brokers);
    // Route librdkafka's log lines through the client context (and so to tracing) at a level
    // that tracing's own filter can then narrow.
    // (Debug only when librdkafka's `debug` contexts are asked for.)
    cc.set_log_level(if cfg.client_properties.contains_key("debug") {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Info
    });
    for (k, v) in defaults {
        cc.set(*k, *v);
    }
    for (k, v) in layers.iter().flat_map(|l| l.iter()) {
        if enforced.iter().any(|(ek, _)| ek == k) {
            tracing::warn!(property = %k, "ignoring client property that this client must set itself");
            continue;
        }
        cc.set(k, v);
    }
    for (k, v) in enforced {
        cc.set(*k, *v);
    }
    if cc
        .get("compression.type")
        .or_else(|| cc.get("compression.codec"))
        .is_some_and(|c| c.eq_ignore_ascii_case("snappy"))
    {
        tracing::warn!(
            "compression.type=snappy: tansu fails to serve fetches of snappy batches; \
             use lz4, gzip or none"
        );
    }
    cc
}

/// Client context forwarding librdkafka's logs and global errors to `tracing`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TracingContext;

impl ClientContext for TracingContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_line(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&error, reason);
    }
}

impl ConsumerContext for TracingContext {
    /// Reports the outcome of asynchronous offset commits ([`crate::PartitionReader::commit_async`]).
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &rdkafka::TopicPartitionList,
    ) {
        if let Err(e) = result {
            tracing::warn!(error = %e, offsets = ?offsets.to_topic_map(), "asynchronous offset commit failed");
        }
    }
}

pub(crate) fn log_line(level: RDKafkaLogLevel, fac: &str, msg: &str) {
    // One shared `client_properties` map feeds consumers and producers alike, so librdkafka's
    // "X is a consumer property and will be ignored by this producer instance" is expected.
    // Connection failures are retried by librdkafka and reported again through
    // `ClientContext::error` (as warnings): no need for an error-level line each time.
    let level = if fac == "CONFWARN" && msg.contains("will be ignored by this") {
        RDKafkaLogLevel::Debug
    } else if fac == "FAIL"
        && matches!(
            level,
            RDKafkaLogLevel::Emerg
                | RDKafkaLogLevel::Alert
                | RDKafkaLogLevel::Critical
                | RDKafkaLogLevel::Error
        )
    {
        RDKafkaLogLevel::Warning
    } else {
        level
    };
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{msg}"),
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{msg}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", fac, "{msg}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{msg}"),
    }
}

/// Global client errors are mostly connectivity problems that librdkafka retries by itself
/// (broker down, all brokers down, ...): warnings, not errors.
pub(crate) fn log_client_error(error: &KafkaError, reason: &str) {
    match error.rdkafka_error_code() {
        Some(code) if is_permanent(code) => {
            tracing::error!(target: "librdkafka", %error, reason, "kafka client error")
        }
        _ => tracing::warn!(target: "librdkafka", %error, reason, "kafka client error (retrying)"),
    }
}

/// Error codes that retrying does not fix.
pub(crate) fn is_permanent(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fatal
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::UnsupportedVersion
            | RDKafkaErrorCode::InvalidArgument
            | RDKafkaErrorCode::UnsupportedFeature
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn layering_order() {
        let mut cfg = KafkaConfig::with_brokers("b:1");
        cfg.client_properties = props(&[("linger.ms", "50"), ("enable.auto.commit", "true")]);
        let cc = client_config(
            &cfg,
            &[("linger.ms", "5"), ("acks", "all")],
            &[("enable.auto.commit", "false")],
        );
        assert_eq!(cc.get("bootstrap.servers"), Some("b:1"));
        assert_eq!(cc.get("linger.ms"), Some("50"));
        assert_eq!(cc.get("acks"), Some("all"));
        assert_eq!(cc.get("enable.auto.commit"), Some("false"));
        assert_eq!(cc.get("fetch.min.bytes"), None);

        // Consumer properties: over the client properties, under the enforced ones, and only
        // for consumers.
        cfg.consumer_properties = props(&[
            ("fetch.min.bytes", "1048576"),
            ("linger.ms", "7"),
            ("enable.auto.commit", "true"),
        ]);
        let consumer = consumer_config(
            &cfg,
            &[("fetch.min.bytes", "1")],
            &[("enable.auto.commit", "false")],
        );
        assert_eq!(consumer.get("fetch.min.bytes"), Some("1048576"));
        assert_eq!(consumer.get("linger.ms"), Some("7"));
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        let other = client_config(&cfg, &[], &[]);
        assert_eq!(other.get("fetch.min.bytes"), None);
        assert_eq!(other.get("linger.ms"), Some("50"));
    }
}
