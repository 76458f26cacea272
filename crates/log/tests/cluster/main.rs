//! The log contract and the Redis backend's own tests, run against a Redis
//! Cluster of three masters and three replicas started for each test.

#[path = "../common/mod.rs"]
mod shared;

/// The shared backends module with `backends` narrowed to the cluster.
mod common {
    pub use crate::shared::*;

    /// Only the Redis backend, on a cluster.
    pub async fn backends(retention: mcp_resume_log::Retention, capacity: usize) -> Vec<Backend> {
        vec![cluster_backend(retention, capacity).await]
    }
}

#[path = "../contract/core.rs"]
mod core;
mod failover;
#[path = "../contract/requests.rs"]
mod requests;
mod reshard;
mod spans;
