#!/usr/bin/env python3
"""observe.py KIND: the node suite's watch observer (tests/node/lib.sh).

Reads the output of `kubectl get ... -w --output-watch-events -o json` (a
stream of JSON documents) on stdin and prints one line per event, stamped
with the time it was read (µs of the wall clock):

    STAMP_US RV TYPE|PAYLOAD

KIND says what PAYLOAD holds:
    lease   spec=HOLDER,TRANSITIONS record=ANNOTATION handoff=ANNOTATION
            (the crash failover record, the last handoff's note, spaces as _)
    slice   eps=NAME:READY,NAME:READY,                  (ready: conditions.ready)
    pod     pod=NAME role=ROLE state=STATE              (STATE: the first container's, JSON)

Fields that are absent print empty (an EndpointSlice without endpoints, a
Pod without status): the stream never ends on them.
"""
import json
import sys
import time


def payload(kind, obj):
    meta = obj.get("metadata") or {}
    if kind == "lease":
        spec = obj.get("spec") or {}
        ann = meta.get("annotations") or {}
        return "spec=%s,%s record=%s handoff=%s" % (
            spec.get("holderIdentity") or "", spec.get("leaseTransitions", 0),
            ann.get("k8slease.io/holder-container", ""),
            ann.get("k8slease.io/handoff", "").replace(" ", "_"))
    if kind == "slice":
        eps = ""
        for ep in obj.get("endpoints") or []:
            ready = (ep.get("conditions") or {}).get("ready")
            name = (ep.get("targetRef") or {}).get("name", "?")
            eps += "%s:%s," % (name, "false" if ready is False else "true")
        return "eps=" + eps
    statuses = (obj.get("status") or {}).get("containerStatuses") or [{}]
    state = json.dumps(statuses[0].get("state") or {}, separators=(",", ":"), sort_keys=True)
    role = (meta.get("labels") or {}).get("role", "")
    return "pod=%s role=%s state=%s" % (meta.get("name", "?"), role, state)


def main():
    kind = sys.argv[1]
    dec = json.JSONDecoder()
    buf = ""
    for line in sys.stdin:
        buf += line
        try:
            doc, end = dec.raw_decode(buf.lstrip())
        except ValueError:
            continue
        buf = buf.lstrip()[end:]
        stamp = time.time_ns() // 1000
        obj = doc.get("object") or {}
        rv = (obj.get("metadata") or {}).get("resourceVersion", "0")
        print("%d %s %s|%s" % (stamp, rv, doc.get("type", "?"), payload(kind, obj)), flush=True)


if __name__ == "__main__":
    main()
