//! The event pipeline: pod watch events into an on-disk outbox ([`outbox`]), and
//! from it to the sinks ([`sink`]: Kafka, JSON lines, Kubernetes Events), one driven
//! delivery loop per sink ([`pipeline`]). The events themselves are the core's
//! (`tether_core::events`).

pub mod outbox;
pub mod pipeline;
pub mod sink;
