#!/bin/bash
#SBATCH --wait-all-nodes=1
echo done
