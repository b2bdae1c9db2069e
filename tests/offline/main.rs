//! tether without a control plane, in one test binary: the binary as a user runs it
//! (`cli`), its `--help` and manual pages (`help`), the book's pages, their links and
//! the offline getting-started page run as written (`book`), the book's reference
//! pages equal to the code (`reference`), the offline commands caught in a trap that any reach for a cluster would
//! fall into (`no_cluster`), the snapshot corpus (`corpus`), discovery's and the
//! workflow's pure stages on whole repositories (`discover`, `workflow`), the loader's
//! properties (`loader_props`), `tether schema` (`schema`), sops compatibility
//! (`sops`), the Git source (`git_source`), signed commits in and out (`signatures`), the Git hosts' APIs and webhooks as contracts (`githost`), OCI
//! artifacts against a real registry (`oci`), image registries and their notifications (`images`), notice receivers against a local HTTP server and a Kafka broker
//! (`notify`), files past the size limit (`limits`) and `tether validate` as CI runs it
//! (`validate`). Snapshots and data-driven cases go
//! through `tether_testkit::snapshot` (`TETHER_BLESS=1` rewrites them).
//!
//! The core's own data tests are `crates/tether-core/tests/core`; the tests against a
//! control plane are `tests/cluster`.

mod book;
mod chart_verify;
mod cli;
mod corpus;
mod discover;
mod generate;
mod git_source;
mod githost;
mod help;
mod image_automation;
mod images;
mod install;
mod limits;
mod loader_props;
mod no_cluster;
mod notify;
mod oci;
mod reference;
mod schema;
mod signatures;
mod sops;
mod validate;
mod workflow;
