#!/bin/bash
if [ "$(cat /app/version.txt 2>/dev/null)" = "1.2.3" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
