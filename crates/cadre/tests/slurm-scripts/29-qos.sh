#!/bin/bash
#SBATCH --qos=normal
echo done
