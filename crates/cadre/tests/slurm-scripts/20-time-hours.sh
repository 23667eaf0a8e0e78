#!/bin/bash
#SBATCH --time=25:00:00
echo done
