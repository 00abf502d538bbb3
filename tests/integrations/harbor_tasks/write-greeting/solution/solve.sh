#!/bin/bash
set -euo pipefail
sed "s/{name}/${GREETING_NAME}/" /app/template.txt > /app/out/greeting.txt
