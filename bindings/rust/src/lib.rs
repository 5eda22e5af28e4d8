//! Safe Rust bindings to Chorus, a collective communication library with the NCCL C API.
//!
//! The bindings create **host** communicators: collectives take ordinary Rust slices, run on
//! the calling thread and have finished when the call returns. Every rank of a communicator
//! makes the matching call with matching lengths, as in NCCL.
//!
//! Ranks find each other through a [`UniqueId`] made by one of them and handed to the others
//! (its bytes can cross process boundaries through any channel). Each rank then calls
//! [`Comm::init_rank`] from its own thread or process.
//!
//! # Example
//!
//! Two ranks in one process, one thread each:
//!
//! ```
//! use chorus::{Comm, ReduceOp, UniqueId};
//!
//! fn main() -> Result<(), chorus::Error> {
//!     let id = UniqueId::new()?;
//!     let sums = std::thread::scope(|s| {
//!         let workers: Vec<_> = (0..2)
//!             .map(|rank| {
//!                 s.spawn(move || -> Result<Vec<f32>, chorus::Error> {
//!                     let comm = Comm::init_rank(2, rank, &id)?;
//!                     let send = vec![rank as f32 + 1.0; 4];
//!                     let mut recv = vec![0.0f32; 4];
//!                     comm.all_reduce(&send, &mut recv, ReduceOp::Sum)?;
//!                     Ok(recv)
//!                 })
//!             })
//!             .collect();
//!         workers.into_iter().map(|w| w.join().unwrap()).collect::<Vec<_>>()
//!     });
//!     for sum in sums {
//!         assert_eq!(sum?, vec![3.0; 4]);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Linking
//!
//! The build script links `libchorus` (or `lib$CHORUS_LIB_NAME`) from the system library path,
//! or from `$CHORUS_LIB_DIR` when that is set.

#![warn(missing_docs)]

use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr;

mod error;
pub mod ffi;
mod group;
mod types;

use error::{c_string, check};
pub use error::{Error, Result, ResultCode};
pub use group::Group;
pub use types::{Bf16, DataType, Element, ReduceOp, F16};

/// The NCCL API level the library implements, coded as `NCCL_VERSION_CODE`
/// (for example 22707 for 2.27.7).
pub fn version() -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: v is a valid place for the result.
    check(
        unsafe { ffi::ncclGetVersion(&mut v) },
        ptr::null_mut(),
        "ncclGetVersion",
    )?;
    Ok(v)
}

/// The version of the Chorus library itself, such as `"0.1.0"`.
pub fn version_string() -> String {
    // SAFETY: returns null or a static NUL-terminated string.
    unsafe { c_string(ffi::chorusGetVersionString()) }
}

/// Rendezvous information for creating one communicator.
///
/// One rank makes it with [`UniqueId::new`] and hands it to every other rank, either by value
/// (threads of one process) or as bytes ([`UniqueId::as_bytes`], [`UniqueId::from_bytes`]).
#[derive(Clone, Copy)]
pub struct UniqueId {
    bytes: [u8; ffi::NCCL_UNIQUE_ID_BYTES],
}

impl UniqueId {
    /// Size of the id in bytes.
    pub const BYTES: usize = ffi::NCCL_UNIQUE_ID_BYTES;

    /// Makes a new id; the calling process hosts the rendezvous of the communicator.
    pub fn new() -> Result<UniqueId> {
        let mut raw = ffi::ncclUniqueId {
            internal: [0; ffi::NCCL_UNIQUE_ID_BYTES],
        };
        // SAFETY: raw is a valid place for the id.
        check(
            unsafe { ffi::ncclGetUniqueId(&mut raw) },
            ptr::null_mut(),
            "ncclGetUniqueId",
        )?;
        let mut bytes = [0u8; ffi::NCCL_UNIQUE_ID_BYTES];
        for (b, c) in bytes.iter_mut().zip(raw.internal.iter()) {
            *b = *c as u8;
        }
        Ok(UniqueId { bytes })
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; ffi::NCCL_UNIQUE_ID_BYTES] {
        &self.bytes
    }

    /// An id received from the rank that made it. Bytes that are not a valid id make
    /// [`Comm::init_rank`] fail.
    pub fn from_bytes(bytes: &[u8; ffi::NCCL_UNIQUE_ID_BYTES]) -> UniqueId {
        UniqueId { bytes: *bytes }
    }

    fn raw(&self) -> ffi::ncclUniqueId {
        let mut internal = [0 as c_char; ffi::NCCL_UNIQUE_ID_BYTES];
        for (c, b) in internal.iter_mut().zip(self.bytes.iter()) {
            *c = *b as c_char;
        }
        ffi::ncclUniqueId { internal }
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UniqueId(")?;
        for b in &self.bytes[..16] {
            write!(f, "{:02x}", b)?;
        }
        f.write_str("..)")
    }
}

impl PartialEq for UniqueId {
    fn eq(&self, other: &UniqueId) -> bool {
        self.bytes[..] == other.bytes[..]
    }
}

impl Eq for UniqueId {}

fn to_c_int(value: usize, what: &str, call: &str) -> Result<c_int> {
    if value > c_int::MAX as usize {
        Err(Error::invalid_argument(format!(
            "{}: {} {} does not fit a C int",
            call, what, value
        )))
    } else {
        Ok(value as c_int)
    }
}

fn check_len(call: &str, name: &str, actual: usize, expected: usize, why: &str) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "{}: {} has {} elements, expected {} ({})",
            call, name, actual, expected, why
        )))
    }
}

fn times_ranks(call: &str, name: &str, len: usize, ranks: usize) -> Result<usize> {
    len.checked_mul(ranks).ok_or_else(|| {
        Error::invalid_argument(format!(
            "{}: {}.len() {} times {} ranks overflows usize",
            call, name, len, ranks
        ))
    })
}

/// A host communicator: one rank's handle on a group of `size()` ranks.
///
/// `Comm` may move to another thread (`Send`) but is not `Sync`: like an NCCL communicator, it
/// must not be used by several threads at once. Dropping it frees it (`ncclCommDestroy`).
///
/// ```compile_fail,E0277
/// fn needs_sync<T: Sync>() {}
/// needs_sync::<chorus::Comm>();
/// ```
pub struct Comm {
    raw: ffi::ncclComm_t,
    rank: usize,
    size: usize,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the library allows a communicator to be used from any thread, one call at a time;
// Comm is not Sync, so shared references never reach two threads.
unsafe impl Send for Comm {}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Comm {
    /// Joins the host communicator of `nranks` ranks described by `id`, as rank `rank`.
    ///
    /// Collective: every rank calls it with the same `nranks` and `id`, each from its own
    /// thread or process, and the call returns once all have joined (or fails after
    /// `CHORUS_INIT_TIMEOUT` seconds).
    pub fn init_rank(nranks: usize, rank: usize, id: &UniqueId) -> Result<Comm> {
        const CALL: &str = "Comm::init_rank";
        if nranks == 0 {
            return Err(Error::invalid_argument(format!(
                "{}: nranks must be at least 1",
                CALL
            )));
        }
        if rank >= nranks {
            return Err(Error::invalid_argument(format!(
                "{}: rank {} is outside [0, {}) (nranks)",
                CALL, rank, nranks
            )));
        }
        let n = to_c_int(nranks, "nranks", CALL)?;
        let r = to_c_int(rank, "rank", CALL)?;
        let mut raw: ffi::ncclComm_t = ptr::null_mut();
        // SAFETY: raw is a valid place for the handle; a null config asks for defaults.
        let code =
            unsafe { ffi::chorusCommInitRankHost(&mut raw, n, id.raw(), r, ptr::null_mut()) };
        if code != ffi::ncclSuccess {
            let err = Error::from_library(code, ptr::null_mut(), "chorusCommInitRankHost");
            if !raw.is_null() {
                // SAFETY: raw is a handle the library gave us and nothing else holds.
                unsafe { ffi::ncclCommAbort(raw) };
            }
            return Err(err);
        }
        if raw.is_null() {
            return Err(Error {
                code: ResultCode::InternalError,
                message: format!("{}: the library returned no communicator", CALL),
            });
        }
        // Owns raw from here on, so it is freed whatever happens below.
        let mut comm = Comm {
            raw,
            rank,
            size: nranks,
            _not_sync: PhantomData,
        };
        let mut count: c_int = 0;
        let mut me: c_int = 0;
        // SAFETY: comm.raw is live; count and me are valid places for the results.
        check(
            unsafe { ffi::ncclCommCount(comm.raw, &mut count) },
            comm.raw,
            "ncclCommCount",
        )?;
        check(
            unsafe { ffi::ncclCommUserRank(comm.raw, &mut me) },
            comm.raw,
            "ncclCommUserRank",
        )?;
        let mut mem: ffi::chorusMemType_t = -1;
        check(
            unsafe { ffi::chorusCommMemType(comm.raw, &mut mem) },
            comm.raw,
            "chorusCommMemType",
        )?;
        if count as usize != nranks || me as usize != rank || mem != ffi::chorusMemHost {
            return Err(Error {
                code: ResultCode::InternalError,
                message: format!(
                    "{}: the library made a communicator of rank {} of {} (memory type {}), \
                     not a host communicator of rank {} of {}",
                    CALL, me, count, mem, rank, nranks
                ),
            });
        }
        comm.rank = me as usize;
        comm.size = count as usize;
        Ok(comm)
    }

    /// This rank's index, in `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The C handle, for calls this crate does not wrap. It stays owned by `self`.
    pub fn as_raw(&self) -> ffi::ncclComm_t {
        self.raw
    }

    /// Frees the communicator, reporting a failure that dropping it would ignore.
    pub fn destroy(self) -> Result<()> {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: raw is live and owned; it is not used again.
        check(
            unsafe { ffi::ncclCommDestroy(raw) },
            ptr::null_mut(),
            "ncclCommDestroy",
        )
    }

    /// Stops the communicator's work without waiting for other ranks, and frees it.
    pub fn abort(self) -> Result<()> {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: raw is live and owned; it is not used again.
        check(
            unsafe { ffi::ncclCommAbort(raw) },
            ptr::null_mut(),
            "ncclCommAbort",
        )
    }

    fn check_rank(&self, call: &str, name: &str, value: usize) -> Result<c_int> {
        if value >= self.size {
            return Err(Error::invalid_argument(format!(
                "{}: {} {} is outside [0, {}) (communicator size)",
                call, name, value, self.size
            )));
        }
        to_c_int(value, name, call)
    }

    fn done(&self, code: ffi::ncclResult_t, call: &str) -> Result<()> {
        check(code, self.raw, call)
    }

    /// Reduces `send` over all ranks into every rank's `recv` (same length as `send`).
    pub fn all_reduce<T: Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        check_len("all_reduce", "recv", recv.len(), send.len(), "send.len()")?;
        // SAFETY: both slices hold send.len() elements of T; host comms finish before return.
        let code = unsafe {
            ffi::ncclAllReduce(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                send.len(),
                T::DATA_TYPE.raw(),
                op.raw(),
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclAllReduce")
    }

    /// Like [`Comm::all_reduce`], with `buf` as both input and output.
    pub fn all_reduce_in_place<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let p: *mut c_void = buf.as_mut_ptr().cast();
        // SAFETY: buf holds buf.len() elements; equal pointers ask for the in-place form.
        let code = unsafe {
            ffi::ncclAllReduce(
                p,
                p,
                buf.len(),
                T::DATA_TYPE.raw(),
                op.raw(),
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclAllReduce")
    }

    /// The pointer of a buffer that only `root` uses: given, it must hold `want.0` elements
    /// (`want.1` says why); `root` must give it; the other ranks pass null to the library.
    fn root_only(
        &self,
        call: &str,
        name: &str,
        buf: Option<(*mut c_void, usize)>,
        want: (usize, &str),
        root: usize,
    ) -> Result<*mut c_void> {
        match buf {
            Some((p, len)) => {
                check_len(call, name, len, want.0, want.1)?;
                Ok(if root == self.rank {
                    p
                } else {
                    ptr::null_mut()
                })
            }
            None if root == self.rank => Err(Error::invalid_argument(format!(
                "{}: {} is None on the root rank {}",
                call, name, root
            ))),
            None => Ok(ptr::null_mut()),
        }
    }

    /// Copies `root`'s `buf` into `buf` on every other rank. All ranks pass the same length.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let r = self.check_rank("broadcast", "root", root)?;
        let p: *mut c_void = buf.as_mut_ptr().cast();
        // SAFETY: buf holds buf.len() elements; equal pointers ask for the in-place form.
        let code = unsafe {
            ffi::ncclBroadcast(
                p,
                p,
                buf.len(),
                T::DATA_TYPE.raw(),
                r,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclBroadcast")
    }

    /// Reduces `send` over all ranks into `recv` on `root`.
    ///
    /// `root` passes `Some(recv)` with `recv.len() == send.len()`; the other ranks may pass
    /// `None` (a buffer given there must have the same length, and is left unchanged).
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "reduce";
        let r = self.check_rank(CALL, "root", root)?;
        let recv_ptr = self.root_only(
            CALL,
            "recv",
            recv.map(|b| (b.as_mut_ptr().cast(), b.len())),
            (send.len(), "send.len()"),
            root,
        )?;
        // SAFETY: send holds send.len() elements, recv (used on root only) as many.
        let code = unsafe {
            ffi::ncclReduce(
                send.as_ptr().cast(),
                recv_ptr,
                send.len(),
                T::DATA_TYPE.raw(),
                op.raw(),
                r,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclReduce")
    }

    /// Reduces `buf` over all ranks into `root`'s `buf`; the other ranks' `buf` is unchanged.
    pub fn reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        root: usize,
    ) -> Result<()> {
        let r = self.check_rank("reduce_in_place", "root", root)?;
        let p: *mut c_void = buf.as_mut_ptr().cast();
        let recv = if root == self.rank {
            p
        } else {
            ptr::null_mut()
        };
        // SAFETY: buf holds buf.len() elements; on root equal pointers mean in place.
        let code = unsafe {
            ffi::ncclReduce(
                p,
                recv,
                buf.len(),
                T::DATA_TYPE.raw(),
                op.raw(),
                r,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclReduce")
    }

    /// Gathers every rank's `send` into `recv`, rank `i`'s block at `i * send.len()`.
    ///
    /// `recv.len()` must be `send.len() * size()`.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const CALL: &str = "all_gather";
        let want = times_ranks(CALL, "send", send.len(), self.size)?;
        check_len(CALL, "recv", recv.len(), want, "send.len() * size()")?;
        // SAFETY: recv holds size() blocks of send.len() elements.
        let code = unsafe {
            ffi::ncclAllGather(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                send.len(),
                T::DATA_TYPE.raw(),
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclAllGather")
    }

    /// Reduces `send` over all ranks and leaves block `rank()` of the result in `recv`.
    ///
    /// `send.len()` must be `recv.len() * size()`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "reduce_scatter";
        let want = times_ranks(CALL, "recv", recv.len(), self.size)?;
        check_len(CALL, "send", send.len(), want, "recv.len() * size()")?;
        // SAFETY: send holds size() blocks of recv.len() elements.
        let code = unsafe {
            ffi::ncclReduceScatter(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                recv.len(),
                T::DATA_TYPE.raw(),
                op.raw(),
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclReduceScatter")
    }

    /// Sends block `j` of `send` to rank `j` and receives rank `i`'s block into block `i` of
    /// `recv`. Both slices hold `size()` blocks of equal length.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        const CALL: &str = "all_to_all";
        if send.len() % self.size != 0 {
            return Err(Error::invalid_argument(format!(
                "{}: send has {} elements, not a multiple of the communicator size {}",
                CALL,
                send.len(),
                self.size
            )));
        }
        check_len(CALL, "recv", recv.len(), send.len(), "send.len()")?;
        let count = send.len() / self.size;
        // SAFETY: both slices hold size() blocks of count elements.
        let code = unsafe {
            ffi::ncclAlltoAll(
                send.as_ptr().cast(),
                recv.as_mut_ptr().cast(),
                count,
                T::DATA_TYPE.raw(),
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclAlltoAll")
    }

    /// Gathers every rank's `send` into `root`'s `recv`, rank `i`'s block at `i * send.len()`.
    ///
    /// `root` passes `Some(recv)` with `recv.len() == send.len() * size()`; the other ranks may
    /// pass `None` (a buffer given there must have that length too, and is left unchanged).
    pub fn gather<T: Element>(
        &self,
        send: &[T],
        recv: Option<&mut [T]>,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "gather";
        let r = self.check_rank(CALL, "root", root)?;
        let want = times_ranks(CALL, "send", send.len(), self.size)?;
        let recv_ptr = self.root_only(
            CALL,
            "recv",
            recv.map(|b| (b.as_mut_ptr().cast(), b.len())),
            (want, "send.len() * size()"),
            root,
        )?;
        // SAFETY: send holds send.len() elements; root's recv holds size() such blocks.
        let code = unsafe {
            ffi::ncclGather(
                send.as_ptr().cast(),
                recv_ptr,
                send.len(),
                T::DATA_TYPE.raw(),
                r,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclGather")
    }

    /// Sends block `i` of `root`'s `send` to rank `i`'s `recv`.
    ///
    /// `root` passes `Some(send)` with `send.len() == recv.len() * size()`; the other ranks may
    /// pass `None` (a buffer given there must have that length too, and is not read).
    pub fn scatter<T: Element>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "scatter";
        let r = self.check_rank(CALL, "root", root)?;
        let want = times_ranks(CALL, "recv", recv.len(), self.size)?;
        // Only read through: the pointer is mutable for the helper's sake alone.
        let send_ptr = self.root_only(
            CALL,
            "send",
            send.map(|b| (b.as_ptr() as *mut c_void, b.len())),
            (want, "recv.len() * size()"),
            root,
        )?;
        // SAFETY: recv holds recv.len() elements; root's send holds size() such blocks.
        let code = unsafe {
            ffi::ncclScatter(
                send_ptr as *const c_void,
                recv.as_mut_ptr().cast(),
                recv.len(),
                T::DATA_TYPE.raw(),
                r,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclScatter")
    }

    /// Sends `buf` to rank `peer`, which receives it with a matching [`Comm::recv`].
    ///
    /// Returns when the transfer is done. Exchanges that must progress together (two ranks
    /// sending to each other) belong in one [`Group`].
    pub fn send<T: Element>(&self, buf: &[T], peer: usize) -> Result<()> {
        let p = self.check_rank("send", "peer", peer)?;
        // SAFETY: buf holds buf.len() elements and outlives the call, which finishes the send.
        let code = unsafe {
            ffi::ncclSend(
                buf.as_ptr().cast(),
                buf.len(),
                T::DATA_TYPE.raw(),
                p,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclSend")
    }

    /// Receives into `buf` what rank `peer` sends with a matching [`Comm::send`].
    pub fn recv<T: Element>(&self, buf: &mut [T], peer: usize) -> Result<()> {
        let p = self.check_rank("recv", "peer", peer)?;
        // SAFETY: buf holds buf.len() elements and outlives the call, which finishes the recv.
        let code = unsafe {
            ffi::ncclRecv(
                buf.as_mut_ptr().cast(),
                buf.len(),
                T::DATA_TYPE.raw(),
                p,
                self.raw,
                ptr::null_mut(),
            )
        };
        self.done(code, "ncclRecv")
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: self.raw is live and owned; nothing uses it after this.
        unsafe {
            ffi::ncclCommDestroy(self.raw);
        }
    }
}
