#!/bin/sh
# The `rights-metadata` step function, in plain shell: reads the event, answers a result.
# Demo rule: everything is world-readable.
event=$(cat)
case "$event" in
  *'"protocol":"workdo/1"'*) ;;
  *) echo '{"status":"error","message":"not a workdo/1 event","retryable":false}'; exit 0 ;;
esac
echo '{"status":"completed","note":"rights: world","object":{"properties":{"access":"world"}}}'
