#!/bin/bash
#SBATCH --oversubscribe
echo done
