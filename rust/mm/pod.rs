// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Plain old data: structs that may be copied from and to user memory.
//!
//! [`pod!`] implements the kernel's `FromBytes` and `AsBytes` for a struct
//! only after proving at compile time what those traits require: every
//! byte of the struct belongs to a listed field, the fields are listed in
//! memory order with no gap between them or after the last (no padding,
//! so no uninitialised bytes), and every field's type is itself
//! `FromBytes + AsBytes` (so every bit pattern is a valid value). Fields
//! cannot be listed twice (their offsets would not increase) and a union
//! is refused (reading its fields needs `unsafe`, which the checks do not
//! have). So the macro is safe to use on any type: a wrong list does not
//! compile.

use kernel::transmute::{AsBytes, FromBytes};

/// The size of the field that `f` projects to.
#[doc(hidden)]
pub(crate) const fn field_size<T, F>(_f: fn(&T) -> &F) -> usize {
    core::mem::size_of::<F>()
}

/// Compiles only if `F` is plain old data.
#[doc(hidden)]
pub(crate) fn is_pod_field<F: FromBytes + AsBytes>(_f: &F) {}

/// Implements `FromBytes` and `AsBytes` for structs whose fields are listed
/// in memory order: `pod!(my_struct { a, b, c }, other { x });`.
macro_rules! pod {
    ($($t:ident { $($f:ident),+ $(,)? }),* $(,)?) => {
        $(
            const _: () = {
                let mut end = 0usize;
                $(
                    assert!(
                        ::core::mem::offset_of!($t, $f) == end,
                        concat!(stringify!($t), ".", stringify!($f),
                                ": fields must be listed in order with no padding"),
                    );
                    end += $crate::mm::pod::field_size(|s: &$t| &s.$f);
                )+
                assert!(
                    end == ::core::mem::size_of::<$t>(),
                    concat!(stringify!($t), ": fields missing or trailing padding"),
                );
            };
            const _: fn(&$t) = |s: &$t| {
                $( $crate::mm::pod::is_pod_field(&s.$f); )+
            };
            // SAFETY: the two items above compile only if the listed fields
            // cover every byte of `$t` with no padding and each field is
            // `FromBytes + AsBytes`: any bit pattern is a valid `$t`, and a
            // `$t` has no uninitialised bytes.
            #[allow(unsafe_code)]
            unsafe impl ::kernel::transmute::FromBytes for $t {}
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe impl ::kernel::transmute::AsBytes for $t {}
        )*
    };
}
pub(crate) use pod;
