#!/bin/bash
#SBATCH --no-requeue
echo done
