// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Netlink visibility: the netdev family's `queue-get` and `page-pool-get`
//! show which queues and page pools zcrx-rs owns, with its buffer size
//! (the `mp-provider` nest of series patch 53), read with the kernel
//! tree's own YNL library.

use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::Zcrx;

use crate::bigbuf::HugePages;
use crate::common::{ensure_loaded, wait_idle};
use crate::net::{self, in_netns, join, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("netlink_dumps_show_provider", netlink_dumps_show_provider)];

/// After [`net::NETDEV_YNL`]: dumps the rx queues and live page pools of
/// `ifindex` (run in the caller's network namespace): one line each,
/// `queue ID NAME LEN` / `pool ID NAME LEN`, `-` and 0 without a provider
/// nest.
const DUMP: &str = r#"
def mp(o):
    m = o.get('mp-provider')
    return (m.get('name', '?'), m.get('rx-buf-len', 0)) if m else ('-', 0)
for q in ynl.dump('queue-get', {'ifindex': ifindex}):
    if q.get('type') == 'rx':
        print('queue', q['id'], *mp(q))
for p in ynl.dump('page-pool-get', {'ifindex': ifindex}):
    if 'detach-time' not in p:
        print('pool', p['id'], *mp(p))
"#;

/// `(kind, id, name, len)` of every line of [`DUMP`] for `ifindex` in `NS_A`.
fn dump(ifindex: u32) -> Result<Vec<(String, u32, String, u64)>, String> {
    let out = join(in_netns(NS_A, move || net::netdev_ynl(DUMP, ifindex)))?;
    out.lines()
        .map(|l| {
            let v: Vec<&str> = l.split_whitespace().collect();
            match v.as_slice() {
                [k, id, name, len] => Ok((
                    k.to_string(),
                    id.parse().map_err(|_| format!("bad line {l:?}"))?,
                    name.to_string(),
                    len.parse().map_err(|_| format!("bad line {l:?}"))?,
                )),
                _ => Err(format!("bad line {l:?}")),
            }
        })
        .collect()
}

/// A 2-queue netdevsim: a context with 32 KiB buffers binds queue 1.
/// `queue-get` then shows queue 1 with `mp-provider {name: zcrx_rs,
/// rx-buf-len: 32768}` and queue 0 without; `page-pool-get` shows the
/// queue's pool with the same nest; after UNBIND neither does.
fn netlink_dumps_show_provider(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let feat = tryo!(crate::common::info()).features;
    if feat & u64::from(zcrx::uapi::ZCRX_RS_FEATURE_NETLINK) == 0 {
        return Fail(format!("INFO lacks ZCRX_RS_FEATURE_NETLINK: {feat:#x}"));
    }
    let _huge = tryo!(HugePages::reserve((4 << 20) / zcrx::dev::huge_page_size() as u64 + 1));
    let n = tryo!(Nsim::up(2));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let (bound_tx, bound_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_netns(NS_A, move || -> Result<(), String> {
        let setup = || -> Result<Zcrx, String> {
            let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
            z.register_area_buf(4 << 20, 32 << 10).map_err(|e| format!("register: {e}"))?;
            z.bind(a_idx, 1, 0).map_err(|e| format!("bind queue 1: {e}"))?;
            Ok(z)
        };
        let z = match setup() {
            Ok(z) => z,
            Err(e) => {
                let _ = bound_tx.send(Err(e.clone()));
                return Err(e);
            }
        };
        let _ = bound_tx.send(Ok(()));
        let _ = go_rx.recv();
        z.unbind().map_err(|e| format!("unbind: {e}"))
    });
    let bound = bound_rx.recv().map_err(|_| "receiver gone".to_string()).and_then(|r| r);
    if let Err(e) = bound {
        let _ = join(rx);
        return Fail(e);
    }
    let during = dump(a_idx);
    let _ = go_tx.send(());
    tryo!(join(rx));
    let during = tryo!(during);
    let after = tryo!(dump(a_idx));
    let show = |v: &[(String, u32, String, u64)]| v.iter().map(|(k, i, nm, l)| format!("{k} {i}: {nm} {l}")).collect::<Vec<_>>().join(", ");
    env.diag(&format!("bound: {}; after UNBIND: {}", show(&during), show(&after)));
    let has = |v: &[(String, u32, String, u64)], kind: &str, id: Option<u32>| {
        v.iter().any(|(k, i, nm, l)| k == kind && id.is_none_or(|id| *i == id) && nm == "zcrx_rs" && *l == 32768)
    };
    if !has(&during, "queue", Some(1)) {
        return Fail("queue-get does not show queue 1 with zcrx_rs and 32768".into());
    }
    if during.iter().any(|(k, i, nm, _)| k == "queue" && *i == 0 && nm != "-") {
        return Fail("queue 0, not bound, shows a provider".into());
    }
    if !has(&during, "pool", None) {
        return Fail("page-pool-get shows no pool of zcrx_rs with 32768".into());
    }
    if after.iter().any(|(_, _, nm, _)| nm != "-") {
        return Fail("a provider is still shown after UNBIND".into());
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
