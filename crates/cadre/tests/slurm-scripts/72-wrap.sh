#!/bin/bash
# wrap: echo hello
echo done
