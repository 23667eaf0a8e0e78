#!/bin/bash
# env: SBATCH_TIMELIMIT=abc
echo done
