#!/usr/bin/env bash
# Installs the system packages the build needs (clang, llvm and libbpf-dev compile
# the XDP program). Does nothing when they are present; needs root otherwise.
set -euo pipefail
need=()
command -v clang >/dev/null 2>&1 || need+=(clang llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The mcastd namespace tests signal daemons with kill(1) and drop privileges with setpriv(1).
[ -x /bin/kill ] || [ -x /usr/bin/kill ] || need+=(procps)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
# Loss on the test segment (mcast-bench path, the loss tests) is an nftables rule on the bridge.
command -v nft >/dev/null 2>&1 || need+=(nftables)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}; run this script as root, or install them as root: apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
