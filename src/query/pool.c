#include "query/pool.h"

#include <pthread.h>
#include <stdlib.h>

struct job {
    void (*fn)(void *, size_t);
    void *arg;
    size_t n, next, done;
    pthread_cond_t finished;
    struct job *link;
};

struct bdb_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    struct job *head, *tail; /* jobs with items not yet started */
    pthread_t *threads;
    int nthreads;
    int stop;
};

static void *worker(void *arg)
{
    bdb_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head && p->stop)
            break;
        struct job *j = p->head;
        size_t i = j->next++;
        if (j->next == j->n) { /* last item handed out: unlink the job */
            p->head = j->link;
            if (!p->head)
                p->tail = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg, i);
        pthread_mutex_lock(&p->mu);
        if (++j->done == j->n)
            pthread_cond_signal(&j->finished);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

bdb_pool *bdb_pool_new(int workers)
{
    if (workers < 1)
        workers = 1;
    bdb_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    p->threads = calloc((size_t)workers, sizeof *p->threads);
    for (int i = 0; i < workers; i++)
        if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) == 0)
            p->nthreads++;
    return p;
}

void bdb_pool_free(bdb_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    free(p);
}

int bdb_pool_workers(const bdb_pool *p)
{
    return p->nthreads;
}

void bdb_pool_run(bdb_pool *p, void (*fn)(void *, size_t), void *arg, size_t n)
{
    if (n == 0)
        return;
    if (n == 1 || p->nthreads == 0) {
        for (size_t i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    struct job j = {fn, arg, n, 0, 0, PTHREAD_COND_INITIALIZER, NULL};
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->link = &j;
    else
        p->head = &j;
    p->tail = &j;
    pthread_cond_broadcast(&p->work);
    while (j.done < j.n)
        pthread_cond_wait(&j.finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&j.finished);
}
