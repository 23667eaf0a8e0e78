#!/bin/bash
#SBATCH --switches=x
echo done
