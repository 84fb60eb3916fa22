#!/bin/sh
# A generated step's function: technical metadata of one file of the format named by $1.
# The step's name says which instance it is (`extract-metadata/image-metadata#2/extract`: the
# second image), so n parallel instances each take their own file.
format=${1:-unknown}
event=$(cat)
step=$(printf '%s' "$event" | sed -n 's/.*"step":"\([^"]*\)".*/\1/p')
instance=$(printf '%s' "$step" | sed -n 's/.*#\([0-9][0-9]*\)\/.*/\1/p')
echo "{\"status\":\"completed\",\"note\":\"$format metadata of file ${instance:-1}\"}"
