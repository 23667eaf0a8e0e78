#!/bin/bash
#SBATCH --dependency=singleton
echo done
