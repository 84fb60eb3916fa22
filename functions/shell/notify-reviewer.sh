#!/bin/sh
# A state machine's function action: tell the reviewer a loan awaits them (here: say so), and
# send the job the signal `notified`.
cat >/dev/null
echo '{"status":"completed","note":"reviewer notified","signal":"notified"}'
