#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# usage: scripts/stage.sh NAME COMMAND...  -- run COMMAND as a timed stage.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "${1:-}" != "--help" ] || { sed -n 3p "$0"; exit 0; }
name=$1; shift
cache_lock
stage_begin "$name"
"$@" || die "stage $name failed: $*"
stage_end
