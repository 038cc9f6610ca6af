//! deferloop: a single-threaded event loop with Twisted-style `Deferred`s, and no
//! async/await.
//!
//! (Crate documentation is being written; see README.md and DESIGN.md.)

#![deny(missing_docs)]

mod clock;
mod context;
pub mod deferred;
mod error;
mod reactor;

pub use clock::{Clock, ManualClock, ManualTimer, Timer};
pub use context::ContextVar;
pub use deferred::failure::{Failure, Message, Panicked};
pub use deferred::{
    defer_later, fail, gather_results, maybe_deferred, race, succeed, Deferred, DeferredList,
    DeferredLock, DeferredQueue, DeferredSemaphore, IntoStep, ListResult, LoopingCall, Resolver,
};
pub use error::{Error, Result};
pub use reactor::{
    default_exception_handler, CurrentCallback, EventLoop, ExceptionContext, Handle, HandleState,
    IoInfo, Loop, Monitor, Remote, Snapshot, TimerInfo,
};
