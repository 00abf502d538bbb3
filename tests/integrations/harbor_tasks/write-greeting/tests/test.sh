#!/bin/bash
# Writes the reward as JSON (Harbor reads /logs/verifier/reward.json before reward.txt).
expected="Hello, ${GREETING_NAME}!"
if [ -f /app/out/greeting.txt ] && [ "$(cat /app/out/greeting.txt)" = "$expected" ]; then
  reward=1
else
  reward=0
fi
printf '{"reward": %s}\n' "$reward" > /logs/verifier/reward.json
