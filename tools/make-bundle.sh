#!/bin/bash
# make-bundle.sh DIR [ARGS...]: an OCI bundle in DIR (config.json from `runc spec`) whose
# rootfs is a static busybox, running ARGS (default: sleep 100000). No image needed.
set -euo pipefail
dir=$1; shift
[ $# -gt 0 ] || set -- sleep 100000
mkdir -p "$dir/rootfs/bin" "$dir/rootfs/proc" "$dir/rootfs/dev" "$dir/rootfs/sys" \
         "$dir/rootfs/tmp" "$dir/rootfs/etc"
cp "$(command -v busybox)" "$dir/rootfs/bin/busybox"
for applet in sh sleep ls cat ps echo true kill; do
  ln -sf busybox "$dir/rootfs/bin/$applet"
done
rm -f "$dir/config.json"
runc spec --bundle "$dir"
/usr/bin/python3 - "$dir/config.json" "$@" <<'PY'
import json, sys
path, args = sys.argv[1], sys.argv[2:]
with open(path) as f:
    spec = json.load(f)
spec["process"]["args"] = args
spec["process"]["env"] = ["PATH=/bin"]       # no image: PATH must be set (docs/protocol.md §6)
spec["process"]["terminal"] = False
spec["root"] = {"path": "rootfs", "readonly": True}
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
PY
