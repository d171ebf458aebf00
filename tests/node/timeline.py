#!/usr/bin/env python3
"""timeline.py DIR SINCE_US [UNTIL_US]: what the node suite's observers saw.

Reads DIR/lease.obs (the Lease's holder), DIR/slice.obs (the Service's
EndpointSlice: its ready endpoints) and DIR/pods.obs (the Pods' role
label), the lines of tests/node/lib.sh's observe():

    STAMP_US RV TYPE|payload

merges them in resourceVersion order (one order for every object of a
cluster: etcd's revision) and prints, between SINCE_US and UNTIL_US (stamps
of arrival), one "key value" per line:

    leader_changes N        holders that took over (a new non-empty holder)
    leaderless_max_ms X     longest time the Lease named nobody
    leaders LIST            the holders in order, comma-separated
    slice_empty_max_ms X    longest time the EndpointSlice had no ready endpoint
    slice_two_max_ms X      longest time it had two or more
    slice_final LIST        its ready endpoints at the end
    label_violations N      events after which a Pod that is not the holder
                            carried role=leader (in resourceVersion order)
    first_violation TEXT    the first of them, if any

Payloads: lease "spec=HOLDER,TRANSITIONS ...", slice "eps=NAME:true,NAME:false,"
(ready from conditions.ready; absent means ready), pods
"pod=NAME role=VALUE".
"""
import os
import sys


def read(path):
    events = []
    if not os.path.exists(path):
        return events
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            try:
                stamp, rv, rest = line.split(" ", 2)
                typ, payload = rest.split("|", 1)
                events.append((int(rv), int(stamp), typ, payload))
            except ValueError:
                continue
    return events


def field(payload, key):
    for word in payload.split(" "):
        if word.startswith(key + "="):
            return word[len(key) + 1:]
    return ""


def main():
    d = sys.argv[1]
    since = int(sys.argv[2])
    until = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 62
    merged = []
    for kind in ("lease", "slice", "pods"):
        for rv, stamp, typ, payload in read(os.path.join(d, kind + ".obs")):
            merged.append((rv, stamp, kind, typ, payload))
    merged.sort()

    holder = ""
    ready = set()
    labelled = set()
    leaders = []
    changes = 0
    leaderless_since = None
    leaderless_max = 0
    empty_since = None
    empty_max = 0
    two_since = None
    two_max = 0
    violations = 0
    first_violation = ""
    last_stamp = since
    in_window = False

    for rv, stamp, kind, typ, payload in merged:
        now_in = since <= stamp <= until
        if now_in and not in_window:
            in_window = True
            # Open intervals that began before the window count from it.
            if holder == "":
                leaderless_since = stamp
            if not ready:
                empty_since = stamp
            if len(ready) >= 2:
                two_since = stamp
        if kind == "lease":
            h = field(payload, "spec").split(",")[0]
            if typ == "DELETED":
                h = ""
            if h != holder:
                if now_in and h:
                    changes += 1
                    leaders.append(h)
                    if leaderless_since is not None:
                        leaderless_max = max(leaderless_max, stamp - leaderless_since)
                    leaderless_since = None
                elif now_in and not h:
                    leaderless_since = stamp
                holder = h
        elif kind == "slice":
            eps = set()
            for ep in field(payload, "eps").split(","):
                if ":" in ep:
                    name, ok = ep.split(":", 1)
                    if ok != "false":
                        eps.add(name)
            if typ == "DELETED":
                eps = set()
            if now_in:
                if not eps and empty_since is None:
                    empty_since = stamp
                if eps and empty_since is not None:
                    empty_max = max(empty_max, stamp - empty_since)
                    empty_since = None
                if len(eps) >= 2 and two_since is None:
                    two_since = stamp
                if len(eps) < 2 and two_since is not None:
                    two_max = max(two_max, stamp - two_since)
                    two_since = None
            ready = eps
        elif kind == "pods":
            pod = field(payload, "pod")
            if typ == "DELETED" or field(payload, "role") != "leader":
                labelled.discard(pod)
            else:
                labelled.add(pod)
        if now_in:
            last_stamp = stamp
            wrong = sorted(p for p in labelled if p != holder)
            if wrong:
                violations += 1
                if not first_violation:
                    first_violation = "rv %d (%s %s): labelled %s, holder %r" % (
                        rv, kind, typ, ",".join(wrong), holder)

    end = min(until, max(last_stamp, since))
    if leaderless_since is not None:
        leaderless_max = max(leaderless_max, end - leaderless_since)
    if empty_since is not None:
        empty_max = max(empty_max, end - empty_since)
    if two_since is not None:
        two_max = max(two_max, end - two_since)
    print("leader_changes %d" % changes)
    print("leaderless_max_ms %d" % (leaderless_max // 1000))
    print("leaders %s" % ",".join(leaders))
    print("slice_empty_max_ms %d" % (empty_max // 1000))
    print("slice_two_max_ms %d" % (two_max // 1000))
    print("slice_final %s" % ",".join(sorted(ready)))
    print("label_violations %d" % violations)
    if first_violation:
        print("first_violation %s" % first_violation)


if __name__ == "__main__":
    main()
