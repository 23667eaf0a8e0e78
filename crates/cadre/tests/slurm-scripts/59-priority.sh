#!/bin/bash
#SBATCH --priority=100
echo done
