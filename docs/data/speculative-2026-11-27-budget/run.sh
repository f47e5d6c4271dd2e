#!/bin/bash
# Probe budget (a pause after a refused probe lasts >= (cost[1] - 1) / 0.03 steps) against the
# pacer before it, interleaved: OLD = a90fcae (pauses of 1, 2, 4, ... steps, one-token probes),
# NEW = 828e3bb (log-floor-on-every-pause.txt: 8ca8f46, the floor on every pause); both Release
# builds (OLD from a clone of a90fcae). The same models, prompts and settings as the one-token
# probe run, whose script this runs.
OLD="${OLD:-/tmp/spec-a90-bench}" exec bash "$(dirname "$0")/../speculative-2026-11-27-probe/run.sh"
