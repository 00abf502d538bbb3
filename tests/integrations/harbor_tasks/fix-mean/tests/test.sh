#!/bin/bash
# Harbor copies tests/ to /tests after the agent finishes and runs this script; the reward goes to
# /logs/verifier/reward.txt.
if python3 /tests/check_stats.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
