#!/bin/sh
# Derivatives (thumbnails, access copies) once every file's metadata is extracted.
cat >/dev/null
echo '{"status":"completed","note":"derivatives made","object":{"properties":{"derivatives":"made"}}}'
