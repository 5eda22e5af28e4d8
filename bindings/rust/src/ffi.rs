//! Raw declarations of the part of the C API (`nccl.h`, `chorus.h`) these bindings use.
//!
//! Everything here is `unsafe` to call and follows the C documentation in the headers. C enums
//! are declared as `c_int` aliases with constants, so that a value the library returns which
//! Rust does not know is never undefined behaviour.

#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs
)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

/// Opaque communicator object.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}

/// Communicator handle.
pub type ncclComm_t = *mut ncclComm;

/// Opaque CUDA stream object.
#[repr(C)]
pub struct CUstream_st {
    _private: [u8; 0],
}

/// CUDA stream handle; host communicators ignore it, so pass null there.
pub type cudaStream_t = *mut CUstream_st;

/// Size of [`ncclUniqueId`] in bytes.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// Rendezvous information made by one rank and handed to all others.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Opaque contents.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// Communicator options (`struct ncclConfig_v22800`). Start from the C initializer values.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
}

/// Result codes (`ncclResult_t`).
pub type ncclResult_t = c_int;
pub const ncclSuccess: ncclResult_t = 0;
pub const ncclUnhandledCudaError: ncclResult_t = 1;
pub const ncclSystemError: ncclResult_t = 2;
pub const ncclInternalError: ncclResult_t = 3;
pub const ncclInvalidArgument: ncclResult_t = 4;
pub const ncclInvalidUsage: ncclResult_t = 5;
pub const ncclRemoteError: ncclResult_t = 6;
pub const ncclInProgress: ncclResult_t = 7;

/// Reduction operators (`ncclRedOp_t`).
pub type ncclRedOp_t = c_int;
pub const ncclSum: ncclRedOp_t = 0;
pub const ncclProd: ncclRedOp_t = 1;
pub const ncclMax: ncclRedOp_t = 2;
pub const ncclMin: ncclRedOp_t = 3;
pub const ncclAvg: ncclRedOp_t = 4;

/// Element types (`ncclDataType_t`).
pub type ncclDataType_t = c_int;
pub const ncclInt8: ncclDataType_t = 0;
pub const ncclUint8: ncclDataType_t = 1;
pub const ncclInt32: ncclDataType_t = 2;
pub const ncclUint32: ncclDataType_t = 3;
pub const ncclInt64: ncclDataType_t = 4;
pub const ncclUint64: ncclDataType_t = 5;
pub const ncclFloat16: ncclDataType_t = 6;
pub const ncclFloat32: ncclDataType_t = 7;
pub const ncclFloat64: ncclDataType_t = 8;
pub const ncclBfloat16: ncclDataType_t = 9;

/// Kind of memory a communicator's collectives take (`chorusMemType_t`).
pub type chorusMemType_t = c_int;
pub const chorusMemHost: chorusMemType_t = 0;
pub const chorusMemDevice: chorusMemType_t = 1;

extern "C" {
    pub fn ncclGetVersion(version: *mut c_int) -> ncclResult_t;
    pub fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t;

    pub fn ncclCommInitRank(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
    ) -> ncclResult_t;
    pub fn ncclCommInitRankConfig(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
        config: *mut ncclConfig_t,
    ) -> ncclResult_t;
    pub fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
    pub fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t;
    pub fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
    pub fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;

    pub fn ncclGetErrorString(result: ncclResult_t) -> *const c_char;
    pub fn ncclGetLastError(comm: ncclComm_t) -> *const c_char;

    pub fn ncclReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclBroadcast(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclAllReduce(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclReduceScatter(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        recvcount: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclAllGather(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        sendcount: usize,
        datatype: ncclDataType_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclAlltoAll(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclGather(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclScatter(
        sendbuff: *const c_void,
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclSend(
        sendbuff: *const c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;
    pub fn ncclRecv(
        recvbuff: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t;

    pub fn ncclGroupStart() -> ncclResult_t;
    pub fn ncclGroupEnd() -> ncclResult_t;

    pub fn chorusGetVersionString() -> *const c_char;
    pub fn chorusCommInitRankHost(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
        config: *mut ncclConfig_t,
    ) -> ncclResult_t;
    pub fn chorusCommMemType(comm: ncclComm_t, memType: *mut chorusMemType_t) -> ncclResult_t;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_header() {
        assert_eq!(std::mem::size_of::<ncclUniqueId>(), 128);
        assert_eq!(std::mem::align_of::<ncclUniqueId>(), 1);
        if std::mem::size_of::<usize>() == 8 {
            assert_eq!(std::mem::size_of::<ncclConfig_t>(), 80);
        }
    }
}
