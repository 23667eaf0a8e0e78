#!/bin/bash
# args: -N2 -n4 -c2 -t10
echo done
