//! The element types and reductions collectives take.

use crate::ffi;

/// Element types of the C API (`ncclDataType_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `i8`
    Int8,
    /// `u8`
    Uint8,
    /// `i32`
    Int32,
    /// `u32`
    Uint32,
    /// `i64`
    Int64,
    /// `u64`
    Uint64,
    /// IEEE half precision, [`F16`]
    Float16,
    /// `f32`
    Float32,
    /// `f64`
    Float64,
    /// bfloat16, [`Bf16`]
    Bfloat16,
}

impl DataType {
    pub(crate) fn raw(self) -> ffi::ncclDataType_t {
        match self {
            DataType::Int8 => ffi::ncclInt8,
            DataType::Uint8 => ffi::ncclUint8,
            DataType::Int32 => ffi::ncclInt32,
            DataType::Uint32 => ffi::ncclUint32,
            DataType::Int64 => ffi::ncclInt64,
            DataType::Uint64 => ffi::ncclUint64,
            DataType::Float16 => ffi::ncclFloat16,
            DataType::Float32 => ffi::ncclFloat32,
            DataType::Float64 => ffi::ncclFloat64,
            DataType::Bfloat16 => ffi::ncclBfloat16,
        }
    }
}

/// IEEE 754 half-precision value, kept as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

/// bfloat16 value (the upper half of an `f32`), kept as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// The nearest bfloat16 (ties to even); NaN stays NaN.
    pub fn from_f32(v: f32) -> Bf16 {
        let bits = v.to_bits();
        if v.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x0040);
        }
        let rounding = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(rounding) >> 16) as u16)
    }

    /// The exact `f32` value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Types collectives can carry: plain numbers for which every bit pattern is a valid value.
///
/// Sealed: implemented for `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `f32`, `f64`, [`F16`] and
/// [`Bf16`] only.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The C API's type for `Self`.
    const DATA_TYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(
            impl sealed::Sealed for $t {}
            impl Element for $t {
                const DATA_TYPE: DataType = DataType::$d;
            }
        )*
    };
}

element! {
    i8 => Int8,
    u8 => Uint8,
    i32 => Int32,
    u32 => Uint32,
    i64 => Int64,
    u64 => Uint64,
    F16 => Float16,
    f32 => Float32,
    f64 => Float64,
    Bf16 => Bfloat16,
}

/// Reduction operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum of the ranks' values.
    Sum,
    /// Product of the ranks' values.
    Prod,
    /// Largest value.
    Max,
    /// Smallest value.
    Min,
    /// Sum divided by the number of ranks.
    Avg,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> ffi::ncclRedOp_t {
        match self {
            ReduceOp::Sum => ffi::ncclSum,
            ReduceOp::Prod => ffi::ncclProd,
            ReduceOp::Max => ffi::ncclMax,
            ReduceOp::Min => ffi::ncclMin,
            ReduceOp::Avg => ffi::ncclAvg,
        }
    }
}
