#!/bin/bash
# args: --wrap=true extra
echo done
