#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# usage: scripts/stage.sh [--lock LOCK] NAME COMMAND...  -- run COMMAND as a timed stage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "${1:-}" != "--help" ] || { sed -n 3p "$0"; exit 0; }
lock=build
if [ "${1:-}" = --lock ]; then lock=$2; shift 2; fi
name=$1; shift
cache_lock "$lock"
source_lock shared
stage_begin "$name"
"$@" || die "stage $name failed: $*"
stage_end
