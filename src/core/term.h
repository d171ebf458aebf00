/* Why a term ended: what both election machines say with their STOPPED
 * action (k8s/election.h, etcd/election.h), and what the line that tells
 * a lost term is made of (kl__elector_report_term_end, core/driver.h).
 * PURE: an enum, for the machines. */
#ifndef KL_CORE_TERM_H
#define KL_CORE_TERM_H

typedef enum kl__term_end {
    KL_TERM_STOPPED,   /* no term lost: stopped by its owner, or over without a term */
    KL_TERM_DEADLINE,  /* no successful renewal within the deadline (Kubernetes: the renew
                          deadline; etcd: the lease's TTL) */
    KL_TERM_TAKEN,     /* the Lease names another holder, or none: the action's identity, epoch */
    KL_TERM_RETAKEN,   /* a new term under our own identity (another elector): its epoch */
    KL_TERM_DELETED,   /* the Lease was deleted (etcd: our key, or another key leads) */
    KL_TERM_PREFERRED, /* coordinated election: the controller prefers another candidate */
    KL_TERM_GONE       /* etcd: the server says the lease is gone (a keepalive answered TTL 0) */
} kl__term_end;

#endif
