//! Point-to-point operations issued together.

use std::fmt;
use std::os::raw::{c_int, c_void};
use std::ptr;

use crate::{check, ffi, Comm, Element, Error, Result};

enum P2pKind {
    Send,
    Recv,
}

struct P2pOp<'a> {
    kind: P2pKind,
    comm: &'a Comm,
    buf: *mut c_void,
    count: usize,
    datatype: ffi::ncclDataType_t,
    peer: c_int,
}

/// Point-to-point operations issued together (`ncclGroupStart` ... `ncclGroupEnd`).
///
/// Collect sends and receives, on one or several communicators, then [`run`](Group::run) them:
/// they progress together, so two ranks may send to each other without waiting on one
/// another. The group borrows every buffer until `run` returns; dropping a group without
/// running it issues nothing.
///
/// ```no_run
/// # fn demo(comm: &chorus::Comm) -> Result<(), chorus::Error> {
/// let peer = 1 - comm.rank();
/// let mine = vec![comm.rank() as u64; 8];
/// let mut theirs = vec![0u64; 8];
/// let mut group = chorus::Group::new();
/// group.send(comm, &mine, peer)?;
/// group.recv(comm, &mut theirs, peer)?;
/// group.run()?;
/// assert_eq!(theirs, vec![peer as u64; 8]);
/// # Ok(())
/// # }
/// ```
///
/// Every buffer must outlive the group's `run`, which the borrow checker enforces:
///
/// ```compile_fail,E0597
/// # fn demo(comm: &chorus::Comm) -> Result<(), chorus::Error> {
/// let mut group = chorus::Group::new();
/// {
///     let short_lived = vec![0u8; 4];
///     group.send(comm, &short_lived, 0)?;
/// }
/// group.run()
/// # }
/// ```
///
/// A group belongs to the thread that made it (the library's groups are per thread):
///
/// ```compile_fail,E0277
/// fn needs_send<T: Send>(_: T) {}
/// needs_send(chorus::Group::new());
/// ```
pub struct Group<'a> {
    ops: Vec<P2pOp<'a>>,
}

impl Default for Group<'_> {
    fn default() -> Self {
        Group::new()
    }
}

impl fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("ops", &self.ops.len())
            .finish()
    }
}

impl<'a> Group<'a> {
    /// An empty group.
    pub fn new() -> Group<'a> {
        Group { ops: Vec::new() }
    }

    /// The number of operations collected so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation has been collected.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Adds a send of `buf` to rank `peer` of `comm`.
    pub fn send<T: Element>(&mut self, comm: &'a Comm, buf: &'a [T], peer: usize) -> Result<()> {
        let peer = comm.check_rank("Group::send", "peer", peer)?;
        self.ops.push(P2pOp {
            kind: P2pKind::Send,
            comm,
            buf: buf.as_ptr() as *mut c_void,
            count: buf.len(),
            datatype: T::DATA_TYPE.raw(),
            peer,
        });
        Ok(())
    }

    /// Adds a receive into `buf` from rank `peer` of `comm`.
    pub fn recv<T: Element>(
        &mut self,
        comm: &'a Comm,
        buf: &'a mut [T],
        peer: usize,
    ) -> Result<()> {
        let peer = comm.check_rank("Group::recv", "peer", peer)?;
        self.ops.push(P2pOp {
            kind: P2pKind::Recv,
            comm,
            buf: buf.as_mut_ptr().cast(),
            count: buf.len(),
            datatype: T::DATA_TYPE.raw(),
            peer,
        });
        Ok(())
    }

    /// Issues every collected operation in one group and waits for all of them.
    pub fn run(self) -> Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        // SAFETY: opens a group on this thread; it is closed below on every path, and nothing
        // between here and there can unwind.
        check(
            unsafe { ffi::ncclGroupStart() },
            ptr::null_mut(),
            "ncclGroupStart",
        )?;
        let mut first_error: Option<Error> = None;
        for op in &self.ops {
            // SAFETY: each buffer is borrowed by self for 'a, so it stays valid until the
            // group ends below; count and datatype describe it.
            let code = unsafe {
                match op.kind {
                    P2pKind::Send => ffi::ncclSend(
                        op.buf as *const c_void,
                        op.count,
                        op.datatype,
                        op.peer,
                        op.comm.raw,
                        ptr::null_mut(),
                    ),
                    P2pKind::Recv => ffi::ncclRecv(
                        op.buf,
                        op.count,
                        op.datatype,
                        op.peer,
                        op.comm.raw,
                        ptr::null_mut(),
                    ),
                }
            };
            if code != ffi::ncclSuccess {
                let call = match op.kind {
                    P2pKind::Send => "ncclSend",
                    P2pKind::Recv => "ncclRecv",
                };
                first_error = Some(Error::from_library(code, op.comm.raw, call));
                break;
            }
        }
        // SAFETY: closes the group opened above; the queued operations run and finish here,
        // while self still borrows their buffers.
        let end = check(
            unsafe { ffi::ncclGroupEnd() },
            ptr::null_mut(),
            "ncclGroupEnd",
        );
        match first_error {
            Some(e) => Err(e),
            None => end,
        }
    }
}
