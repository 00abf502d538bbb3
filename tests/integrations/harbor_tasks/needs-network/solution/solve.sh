#!/bin/bash
jq -r .version /app/package.json > /app/version.txt
