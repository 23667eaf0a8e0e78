#!/bin/bash
#SBATCH --dependency=afterok:@PARENT@?afternotok:@PARENT2@
echo done
