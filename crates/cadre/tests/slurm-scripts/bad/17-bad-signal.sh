#!/bin/bash
#SBATCH --signal=FOO
echo done
