//! Errors: the C API's result codes and the message `ncclGetLastError` gives with them.

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;

use crate::ffi;

/// Result of the fallible calls of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Kind of failure, after the C API's `ncclResult_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultCode {
    /// A CUDA call failed (`ncclUnhandledCudaError`).
    UnhandledCudaError,
    /// A system call failed (`ncclSystemError`).
    SystemError,
    /// The library hit an internal error (`ncclInternalError`).
    InternalError,
    /// An argument was invalid (`ncclInvalidArgument`).
    InvalidArgument,
    /// The call was not valid in the current state (`ncclInvalidUsage`).
    InvalidUsage,
    /// A peer process exited or the network failed (`ncclRemoteError`).
    RemoteError,
    /// A non-blocking operation has not finished (`ncclInProgress`).
    InProgress,
    /// A code this crate does not know.
    Other(i32),
}

impl ResultCode {
    fn from_raw(code: ffi::ncclResult_t) -> ResultCode {
        match code {
            ffi::ncclUnhandledCudaError => ResultCode::UnhandledCudaError,
            ffi::ncclSystemError => ResultCode::SystemError,
            ffi::ncclInternalError => ResultCode::InternalError,
            ffi::ncclInvalidArgument => ResultCode::InvalidArgument,
            ffi::ncclInvalidUsage => ResultCode::InvalidUsage,
            ffi::ncclRemoteError => ResultCode::RemoteError,
            ffi::ncclInProgress => ResultCode::InProgress,
            other => ResultCode::Other(other),
        }
    }

    /// The C API's value for this code.
    pub fn raw(self) -> i32 {
        match self {
            ResultCode::UnhandledCudaError => ffi::ncclUnhandledCudaError,
            ResultCode::SystemError => ffi::ncclSystemError,
            ResultCode::InternalError => ffi::ncclInternalError,
            ResultCode::InvalidArgument => ffi::ncclInvalidArgument,
            ResultCode::InvalidUsage => ffi::ncclInvalidUsage,
            ResultCode::RemoteError => ffi::ncclRemoteError,
            ResultCode::InProgress => ffi::ncclInProgress,
            ResultCode::Other(v) => v,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ResultCode::UnhandledCudaError => "ncclUnhandledCudaError",
            ResultCode::SystemError => "ncclSystemError",
            ResultCode::InternalError => "ncclInternalError",
            ResultCode::InvalidArgument => "ncclInvalidArgument",
            ResultCode::InvalidUsage => "ncclInvalidUsage",
            ResultCode::RemoteError => "ncclRemoteError",
            ResultCode::InProgress => "ncclInProgress",
            ResultCode::Other(_) => "unknown result code",
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ResultCode::Other(v) => write!(f, "result code {}", v),
            code => f.write_str(code.name()),
        }
    }
}

/// A failed call: its [`ResultCode`] and a message saying what went wrong.
///
/// Errors found by this crate before calling the library (slice lengths, ranks) carry
/// [`ResultCode::InvalidArgument`] and a message naming the argument. Errors reported by the
/// library carry its code and its detailed message (`ncclGetLastError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub(crate) code: ResultCode,
    pub(crate) message: String,
}

impl Error {
    /// The kind of failure.
    pub fn code(&self) -> ResultCode {
        self.code
    }

    /// What went wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn invalid_argument(message: String) -> Error {
        Error {
            code: ResultCode::InvalidArgument,
            message,
        }
    }

    /// Builds the error for a failed library call on `comm` (null when there is none).
    pub(crate) fn from_library(
        code: ffi::ncclResult_t,
        comm: ffi::ncclComm_t,
        call: &str,
    ) -> Error {
        // SAFETY: both functions accept any value and return null or a NUL-terminated string
        // that stays valid until the next call on this thread; it is copied at once.
        let detail = unsafe { c_string(ffi::ncclGetLastError(comm)) };
        let message = if detail.is_empty() {
            let text = unsafe { c_string(ffi::ncclGetErrorString(code)) };
            format!("{} failed: {}", call, text)
        } else if detail.starts_with(call) {
            detail
        } else {
            format!("{} failed: {}", call, detail)
        };
        Error {
            code: ResultCode::from_raw(code),
            message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for Error {}

/// Copies a C string, or gives an empty string for null.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

pub(crate) fn check(code: ffi::ncclResult_t, comm: ffi::ncclComm_t, call: &str) -> Result<()> {
    if code == ffi::ncclSuccess {
        Ok(())
    } else {
        Err(Error::from_library(code, comm, call))
    }
}
