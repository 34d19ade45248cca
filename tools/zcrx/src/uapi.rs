// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! The uAPI of `/dev/zcrx`: the same generated file the module includes
//! (`uapi_bindings.rs`, generated from `zcrx_rs.h`), plus the ioctl numbers,
//! computed the way the kernel's `<asm/ioctl.h>` does on the target.

#[allow(non_camel_case_types, non_upper_case_globals, dead_code, missing_docs)]
mod generated {
    include!("uapi_bindings.rs");
}

pub use generated::*;

const IOC_NRBITS: u32 = 8;
const IOC_TYPEBITS: u32 = 8;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

// The architectures whose <asm/ioctl.h> overrides asm-generic's: 13 size
// bits and three direction bits, "none" being 1. (asm-generic: x86, arm,
// arm64, riscv, s390, loongarch, ...)
const NOT_GENERIC: bool = cfg!(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips32r6",
    target_arch = "mips64",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64"
));
const IOC_SIZEBITS: u32 = if NOT_GENERIC { 13 } else { 14 };
const IOC_NONE: u32 = if NOT_GENERIC { 1 } else { 0 };
const IOC_WRITE: u32 = if NOT_GENERIC { 4 } else { 1 };
const IOC_READ: u32 = 2;

const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    (dir << IOC_DIRSHIFT) | (ty << IOC_TYPESHIFT) | (nr << IOC_NRSHIFT) | ((size as u32) << IOC_SIZESHIFT)
}

/// `ZCRX_RS_IOC_INFO`
pub const IOC_INFO: u32 = ioc(IOC_READ, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_INFO, core::mem::size_of::<zcrx_rs_info>());
/// `ZCRX_RS_IOC_REGISTER_AREA`
pub const IOC_REGISTER_AREA: u32 =
    ioc(IOC_READ | IOC_WRITE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_REGISTER_AREA, core::mem::size_of::<zcrx_rs_area_reg>());
/// `ZCRX_RS_IOC_BIND`
pub const IOC_BIND: u32 = ioc(IOC_READ | IOC_WRITE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_BIND, core::mem::size_of::<zcrx_rs_bind>());
/// `ZCRX_RS_IOC_RECV`
pub const IOC_RECV: u32 = ioc(IOC_READ | IOC_WRITE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_RECV, core::mem::size_of::<zcrx_rs_recv>());
/// `ZCRX_RS_IOC_STATS`
pub const IOC_STATS: u32 = ioc(IOC_READ, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_STATS, core::mem::size_of::<zcrx_rs_stats>());
/// `ZCRX_RS_IOC_UNBIND`
pub const IOC_UNBIND: u32 = ioc(IOC_NONE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNBIND, 0);
/// `ZCRX_RS_IOC_UNREGISTER_AREA`
pub const IOC_UNREGISTER_AREA: u32 = ioc(IOC_NONE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNREGISTER_AREA, 0);
/// `ZCRX_RS_IOC_EVENTS`
pub const IOC_EVENTS: u32 = ioc(IOC_READ | IOC_WRITE, ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_EVENTS, core::mem::size_of::<zcrx_rs_events>());

#[cfg(test)]
mod tests {
    //! The layout test: compile a C program against the header with the
    //! system compiler and compare every size, offset and ioctl number with
    //! what this crate (and so the module, which includes the same
    //! generated file) uses.
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::path::PathBuf;
    use std::process::Command;

    /// The probe's values, with the names the Rust definitions see
    /// (`current`: `-D__ZCRX_RS_CURRENT_NAMES`, as bindgen is run) or as a C
    /// program sees them by default (1.0's names kept in unions).
    fn c_values(current: bool) -> Vec<(String, u64)> {
        let inc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include/uapi");
        let dir = std::env::temp_dir().join(format!("zcrx-layout-{}-{current}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("layout.c");
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <linux/zcrx_rs.h>\n\
             #define S(t) printf(\"sizeof %s %zu\\n\", #t, sizeof(struct t));\n\
             #define O(t, f) printf(\"offsetof %s.%s %zu\\n\", #t, #f, offsetof(struct t, f));\n\
             #define I(n) printf(\"ioctl %s %lu\\n\", #n, (unsigned long)n);\nint main(void) {\n",
        );
        for line in FIELDS {
            c.push_str(line);
            c.push('\n');
        }
        c.push_str("return 0; }\n");
        std::fs::write(&src, c).unwrap();
        let exe = dir.join("layout");
        let mut cc = Command::new("cc");
        cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"]).arg(&inc);
        if current {
            cc.arg("-D__ZCRX_RS_CURRENT_NAMES");
        }
        let st = cc.arg(&src).arg("-o").arg(&exe).status().expect("cc");
        assert!(st.success(), "compiling the layout probe failed");
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let mut it = l.split_whitespace();
                let _kind = it.next().unwrap();
                let name = it.next().unwrap().to_string();
                (name, it.next().unwrap().parse().unwrap())
            })
            .collect()
    }

    const FIELDS: &[&str] = &[
        "S(zcrx_rs_info) O(zcrx_rs_info, api_version) O(zcrx_rs_info, page_size) O(zcrx_rs_info, features) O(zcrx_rs_info, contexts) O(zcrx_rs_info, pools) O(zcrx_rs_info, max_buf_size) O(zcrx_rs_info, __resv)",
        "S(zcrx_rs_area_reg) O(zcrx_rs_area_reg, addr) O(zcrx_rs_area_reg, len) O(zcrx_rs_area_reg, flags) O(zcrx_rs_area_reg, area_id) O(zcrx_rs_area_reg, buf_size) O(zcrx_rs_area_reg, dmabuf_fd) O(zcrx_rs_area_reg, __resv)",
        "S(zcrx_rs_ring_offsets) O(zcrx_rs_ring_offsets, head) O(zcrx_rs_ring_offsets, tail) O(zcrx_rs_ring_offsets, rqes) O(zcrx_rs_ring_offsets, stats)",
        "S(zcrx_rs_ring_stats) O(zcrx_rs_ring_stats, zc_bytes) O(zcrx_rs_ring_stats, alloc_fail) O(zcrx_rs_ring_stats, events) O(zcrx_rs_ring_stats, __resv)",
        "S(zcrx_rs_events) O(zcrx_rs_events, arm) O(zcrx_rs_events, fired) O(zcrx_rs_events, armed) O(zcrx_rs_events, __resv)",
        "S(zcrx_rs_bind) O(zcrx_rs_bind, ifindex) O(zcrx_rs_bind, rxq) O(zcrx_rs_bind, rq_entries) O(zcrx_rs_bind, flags) O(zcrx_rs_bind, offsets) O(zcrx_rs_bind, mmap_len) O(zcrx_rs_bind, __resv)",
        "S(zcrx_rs_rqe) O(zcrx_rs_rqe, off) O(zcrx_rs_rqe, len) O(zcrx_rs_rqe, flags)",
        "S(zcrx_rs_rec) O(zcrx_rs_rec, off) O(zcrx_rs_rec, len) O(zcrx_rs_rec, flags)",
        "S(zcrx_rs_recv) O(zcrx_rs_recv, sockfd) O(zcrx_rs_recv, flags) O(zcrx_rs_recv, recs) O(zcrx_rs_recv, nr_recs) O(zcrx_rs_recv, __pad) O(zcrx_rs_recv, bytes) O(zcrx_rs_recv, __resv)",
        "S(zcrx_rs_stats) O(zcrx_rs_stats, zc_bytes) O(zcrx_rs_stats, copy_records) O(zcrx_rs_stats, user_held) O(zcrx_rs_stats, free_buffers) O(zcrx_rs_stats, __resv)",
        "I(ZCRX_RS_IOC_INFO) I(ZCRX_RS_IOC_REGISTER_AREA) I(ZCRX_RS_IOC_BIND) I(ZCRX_RS_IOC_RECV) I(ZCRX_RS_IOC_STATS) I(ZCRX_RS_IOC_UNBIND) I(ZCRX_RS_IOC_UNREGISTER_AREA) I(ZCRX_RS_IOC_EVENTS)",
    ];

    fn rust_values() -> Vec<(String, u64)> {
        macro_rules! s {
            ($t:ident) => {
                (stringify!($t).to_string(), size_of::<$t>() as u64)
            };
        }
        macro_rules! o {
            ($t:ident, $f:ident) => {
                (format!("{}.{}", stringify!($t), stringify!($f)), offset_of!($t, $f) as u64)
            };
        }
        vec![
            s!(zcrx_rs_info),
            o!(zcrx_rs_info, api_version),
            o!(zcrx_rs_info, page_size),
            o!(zcrx_rs_info, features),
            o!(zcrx_rs_info, contexts),
            o!(zcrx_rs_info, pools),
            o!(zcrx_rs_info, max_buf_size),
            o!(zcrx_rs_info, __resv),
            s!(zcrx_rs_area_reg),
            o!(zcrx_rs_area_reg, addr),
            o!(zcrx_rs_area_reg, len),
            o!(zcrx_rs_area_reg, flags),
            o!(zcrx_rs_area_reg, area_id),
            o!(zcrx_rs_area_reg, buf_size),
            o!(zcrx_rs_area_reg, dmabuf_fd),
            o!(zcrx_rs_area_reg, __resv),
            s!(zcrx_rs_ring_offsets),
            o!(zcrx_rs_ring_offsets, head),
            o!(zcrx_rs_ring_offsets, tail),
            o!(zcrx_rs_ring_offsets, rqes),
            o!(zcrx_rs_ring_offsets, stats),
            s!(zcrx_rs_ring_stats),
            o!(zcrx_rs_ring_stats, zc_bytes),
            o!(zcrx_rs_ring_stats, alloc_fail),
            o!(zcrx_rs_ring_stats, events),
            o!(zcrx_rs_ring_stats, __resv),
            s!(zcrx_rs_events),
            o!(zcrx_rs_events, arm),
            o!(zcrx_rs_events, fired),
            o!(zcrx_rs_events, armed),
            o!(zcrx_rs_events, __resv),
            s!(zcrx_rs_bind),
            o!(zcrx_rs_bind, ifindex),
            o!(zcrx_rs_bind, rxq),
            o!(zcrx_rs_bind, rq_entries),
            o!(zcrx_rs_bind, flags),
            o!(zcrx_rs_bind, offsets),
            o!(zcrx_rs_bind, mmap_len),
            o!(zcrx_rs_bind, __resv),
            s!(zcrx_rs_rqe),
            o!(zcrx_rs_rqe, off),
            o!(zcrx_rs_rqe, len),
            o!(zcrx_rs_rqe, flags),
            s!(zcrx_rs_rec),
            o!(zcrx_rs_rec, off),
            o!(zcrx_rs_rec, len),
            o!(zcrx_rs_rec, flags),
            s!(zcrx_rs_recv),
            o!(zcrx_rs_recv, sockfd),
            o!(zcrx_rs_recv, flags),
            o!(zcrx_rs_recv, recs),
            o!(zcrx_rs_recv, nr_recs),
            o!(zcrx_rs_recv, __pad),
            o!(zcrx_rs_recv, bytes),
            o!(zcrx_rs_recv, __resv),
            s!(zcrx_rs_stats),
            o!(zcrx_rs_stats, zc_bytes),
            o!(zcrx_rs_stats, copy_records),
            o!(zcrx_rs_stats, user_held),
            o!(zcrx_rs_stats, free_buffers),
            o!(zcrx_rs_stats, __resv),
            ("ZCRX_RS_IOC_INFO".into(), IOC_INFO as u64),
            ("ZCRX_RS_IOC_REGISTER_AREA".into(), IOC_REGISTER_AREA as u64),
            ("ZCRX_RS_IOC_BIND".into(), IOC_BIND as u64),
            ("ZCRX_RS_IOC_RECV".into(), IOC_RECV as u64),
            ("ZCRX_RS_IOC_STATS".into(), IOC_STATS as u64),
            ("ZCRX_RS_IOC_UNBIND".into(), IOC_UNBIND as u64),
            ("ZCRX_RS_IOC_UNREGISTER_AREA".into(), IOC_UNREGISTER_AREA as u64),
            ("ZCRX_RS_IOC_EVENTS".into(), IOC_EVENTS as u64),
        ]
    }

    #[test]
    fn layouts_match_the_c_header() {
        let c = c_values(true);
        let r = rust_values();
        assert_eq!(c.len(), r.len(), "probe and table list different items");
        for (cv, rv) in c.iter().zip(r.iter()) {
            assert_eq!(cv, rv, "C and Rust disagree");
        }
    }

    /// A C program's default view (1.0's names kept beside the current ones
    /// in anonymous unions) has the same sizes and offsets, but for the two
    /// `__resv` arrays that 1.0 made longer: there they start where 1.0's
    /// did (tools/uapi-compat/ checks every 1.0 name).
    #[test]
    fn c_default_view_has_the_same_layout() {
        let c = c_values(false);
        let r = rust_values();
        assert_eq!(c.len(), r.len(), "probe and table list different items");
        for (cv, rv) in c.iter().zip(r.iter()) {
            match cv.0.as_str() {
                "zcrx_rs_info.__resv" => assert_eq!(cv.1, offset_of!(zcrx_rs_info, max_buf_size) as u64),
                "zcrx_rs_area_reg.__resv" => assert_eq!(cv.1, offset_of!(zcrx_rs_area_reg, buf_size) as u64),
                _ => assert_eq!(cv, rv, "C's default view and Rust disagree"),
            }
        }
    }
}
