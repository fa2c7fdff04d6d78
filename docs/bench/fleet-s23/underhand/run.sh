#!/bin/bash
# usage: run.sh SEED TAG
cd /tmp/s23u
export LEDGER_DYNAMODB_LOCAL_DIR=/work/main/infra/ddblocal LEDGER_FLEET_LOG_LEVEL=trace
uptime > load-$2.txt
nice -n 5 ./ledgerbench fleet -shards 1000 -rate 10 -duration 2m -idle 30s -drain-timeout 5m -seed $1 -v -o F-$2.md -json F-$2.json > F-$2.log 2>&1
echo $? > F-$2.rc
