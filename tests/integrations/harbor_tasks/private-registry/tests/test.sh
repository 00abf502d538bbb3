#!/bin/bash
if [ -f /srv/toolbox.yaml ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
