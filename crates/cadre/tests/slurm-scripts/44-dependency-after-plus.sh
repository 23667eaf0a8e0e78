#!/bin/bash
#SBATCH -d after:@PARENT@+5
echo done
