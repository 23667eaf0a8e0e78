#!/bin/bash
#SBATCH --switches=1@1:00
echo done
