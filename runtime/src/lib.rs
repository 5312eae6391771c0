//! Sluice's actor runtime (ractor): the supervisor, the reconciler, one actor
//! per running operation, the health-signal actor and the sub-batch pool.
//!
//! Not built yet: this crate exists so the workspace has its final shape. The
//! store it will drive (`sluice-store`) already provides everything the actors
//! persist: claims with leases and fencing, batch planning, batch claims, and
//! exactly-once sub-batch transactions. See ARCHITECTURE.md.
