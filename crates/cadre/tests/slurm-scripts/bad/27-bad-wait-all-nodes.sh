#!/bin/bash
#SBATCH --wait-all-nodes=5
echo done
